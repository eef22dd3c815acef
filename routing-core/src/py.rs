//! The Python bindings: `warmstart._routing_core` (its typed surface is `_routing_core.pyi`).
//!
//! Every entry point runs under [`guard`]: a panic inside the core becomes `CoreError` (a
//! `RuntimeError`, which the proxy answers with a 500 and the picker with its failure mode) and is
//! counted in [`PANICS`], which the router exports as a metric. A panic may leave the object it
//! was changing partly updated, never unsafe.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PySet, PyString, PyTuple};

use crate::events::{self, EngineHash, Event};
use crate::eventindex;
use crate::hashing::{self, Part};
use crate::loads;
use crate::picking;
use crate::shares;
use crate::textindex;

create_exception!(_routing_core, DecodeError, PyValueError, "The payload is not a KV-event batch in any known encoding.");
create_exception!(_routing_core, CoreError, PyRuntimeError, "The routing core failed (a panic inside it); counted in panics().");

/// Panics caught at the boundary since the module was loaded.
static PANICS: AtomicU64 = AtomicU64::new(0);

fn guard<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            PANICS.fetch_add(1, Ordering::Relaxed);
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            Err(CoreError::new_err(format!("routing core failed: {message}")))
        }
    }
}

fn decode_error(err: events::DecodeError) -> PyErr {
    DecodeError::new_err(err.0)
}

// ---- hashing

#[pyfunction]
fn block_hashes(text: &Bound<'_, PyString>, block_chars: usize, max_blocks: usize) -> PyResult<Vec<u64>> {
    let text = text.to_cow().unwrap_or_else(|_| text.to_string_lossy());
    guard(|| Ok(hashing::block_hashes(&text, block_chars, max_blocks)))
}

#[pyfunction]
fn prompt_hashes(head: &Bound<'_, PyString>, block_chars: usize, max_blocks: usize) -> PyResult<(Vec<u64>, Option<u64>, usize)> {
    let head = head.to_cow().unwrap_or_else(|_| head.to_string_lossy());
    guard(|| {
        let hashes = hashing::prompt_hashes(&head, block_chars, max_blocks);
        Ok((hashes.blocks, hashes.anchor, hashes.anchor_chars))
    })
}

#[pyfunction]
#[pyo3(signature = (tokens, block_size, parent = 0))]
fn chain_keys(tokens: Vec<i64>, block_size: usize, parent: u64) -> PyResult<Vec<u64>> {
    guard(|| Ok(hashing::chain_keys(&tokens, block_size, parent.to_be_bytes())))
}

enum OwnedPart {
    Text(String),
    Int(i128),
}

fn owned_part(value: &Bound<'_, PyAny>) -> PyResult<OwnedPart> {
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(OwnedPart::Text(text.to_cow().map(|c| c.into_owned()).unwrap_or_else(|_| text.to_string_lossy().into_owned())));
    }
    match value.extract::<i128>() {
        Ok(int) => Ok(OwnedPart::Int(int)),
        Err(_) => Err(PyTypeError::new_err("a stable_hash part is a str or an int")),
    }
}

fn part(owned: &OwnedPart) -> Part<'_> {
    match owned {
        OwnedPart::Text(text) => Part::Text(text),
        OwnedPart::Int(int) => Part::Int(*int),
    }
}

#[pyfunction]
#[pyo3(signature = (*parts))]
fn stable_hash(parts: &Bound<'_, PyTuple>) -> PyResult<u64> {
    let owned: Vec<OwnedPart> = parts.iter().map(|p| owned_part(&p)).collect::<PyResult<_>>()?;
    guard(|| Ok(hashing::stable_hash(&owned.iter().map(part).collect::<Vec<_>>())))
}

#[pyfunction]
fn rendezvous_order(seed: &Bound<'_, PyAny>, names: Vec<String>) -> PyResult<Vec<String>> {
    let seed = owned_part(seed)?;
    guard(|| {
        let views: Vec<&str> = names.iter().map(String::as_str).collect();
        Ok(hashing::rendezvous(&part(&seed), &views).into_iter().map(|i| names[i].clone()).collect())
    })
}

#[pyfunction]
fn load_ceiling(total_inflight: i64, replicas: usize, epsilon: f64, min_ceiling: i64) -> i64 {
    loads::load_ceiling(total_inflight, replicas, epsilon, min_ceiling)
}

#[pyfunction]
fn share_bound(recent_total: f64, replicas: usize, epsilon: f64, slack: f64) -> f64 {
    loads::share_bound(recent_total, replicas, epsilon, slack)
}

#[pyfunction]
fn panics() -> u64 {
    PANICS.load(Ordering::Relaxed)
}

#[pyfunction]
fn check_panic_guard(message: &str) -> PyResult<()> {
    guard(|| panic!("{message}"))
}

// ---- KV events

fn hash_to_py(py: Python<'_>, hash: &EngineHash) -> PyResult<Py<PyAny>> {
    Ok(match hash {
        EngineHash::Int(int) => int.into_pyobject(py)?.into_any().unbind(),
        EngineHash::Bytes(bytes) => PyBytes::new(py, bytes).into_any().unbind(),
    })
}

fn hash_from_py(value: &Bound<'_, PyAny>) -> PyResult<EngineHash> {
    if let Ok(bytes) = value.cast::<PyBytes>() {
        return Ok(EngineHash::Bytes(bytes.as_bytes().to_vec()));
    }
    value.extract::<i128>().map(EngineHash::Int).map_err(|_| PyTypeError::new_err("a block hash is an int or bytes"))
}

fn hashes_from_py(values: &Bound<'_, PyAny>) -> PyResult<Vec<EngineHash>> {
    values.try_iter()?.map(|v| hash_from_py(&v?)).collect()
}

fn hashes_to_py<'py>(py: Python<'py>, hashes: &[EngineHash]) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, hashes.iter().map(|h| hash_to_py(py, h)).collect::<PyResult<Vec<_>>>()?)
}

#[pyclass(frozen, eq, module = "warmstart._routing_core")]
#[derive(PartialEq)]
struct BlockStored(Event);

#[pymethods]
impl BlockStored {
    #[new]
    fn new(block_hashes: &Bound<'_, PyAny>, parent_block_hash: Option<&Bound<'_, PyAny>>, token_ids: Vec<i64>, block_size: usize) -> PyResult<Self> {
        Ok(BlockStored(Event::BlockStored {
            block_hashes: hashes_from_py(block_hashes)?,
            parent: parent_block_hash.map(hash_from_py).transpose()?,
            token_ids,
            block_size,
        }))
    }
    #[getter]
    fn block_hashes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        match &self.0 {
            Event::BlockStored { block_hashes, .. } => hashes_to_py(py, block_hashes),
            _ => unreachable!(),
        }
    }
    #[getter]
    fn parent_block_hash(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        match &self.0 {
            Event::BlockStored { parent, .. } => parent.as_ref().map(|h| hash_to_py(py, h)).transpose(),
            _ => unreachable!(),
        }
    }
    #[getter]
    fn token_ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        match &self.0 {
            Event::BlockStored { token_ids, .. } => PyTuple::new(py, token_ids),
            _ => unreachable!(),
        }
    }
    #[getter]
    fn block_size(&self) -> usize {
        match &self.0 {
            Event::BlockStored { block_size, .. } => *block_size,
            _ => unreachable!(),
        }
    }
    fn __repr__(&self) -> String {
        format!("{:?}", self.0)
    }
}

#[pyclass(frozen, eq, module = "warmstart._routing_core")]
#[derive(PartialEq)]
struct Unkeyable(Event);

#[pymethods]
impl Unkeyable {
    #[new]
    fn new(block_hashes: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Unkeyable(Event::Unkeyable { block_hashes: hashes_from_py(block_hashes)? }))
    }
    #[getter]
    fn block_hashes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        match &self.0 {
            Event::Unkeyable { block_hashes } => hashes_to_py(py, block_hashes),
            _ => unreachable!(),
        }
    }
    fn __repr__(&self) -> String {
        format!("{:?}", self.0)
    }
}

#[pyclass(frozen, eq, module = "warmstart._routing_core")]
#[derive(PartialEq)]
struct BlockRemoved(Event);

#[pymethods]
impl BlockRemoved {
    #[new]
    fn new(block_hashes: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(BlockRemoved(Event::BlockRemoved { block_hashes: hashes_from_py(block_hashes)? }))
    }
    #[getter]
    fn block_hashes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        match &self.0 {
            Event::BlockRemoved { block_hashes } => hashes_to_py(py, block_hashes),
            _ => unreachable!(),
        }
    }
    fn __repr__(&self) -> String {
        format!("{:?}", self.0)
    }
}

#[pyclass(frozen, eq, module = "warmstart._routing_core")]
#[derive(PartialEq)]
struct AllBlocksCleared(Event);

#[pymethods]
impl AllBlocksCleared {
    #[new]
    fn new() -> Self {
        AllBlocksCleared(Event::AllBlocksCleared)
    }
    fn __repr__(&self) -> String {
        "AllBlocksCleared".to_owned()
    }
}

fn event_to_py(py: Python<'_>, event: &Event) -> PyResult<Py<PyAny>> {
    let cloned = event.clone();
    Ok(match event {
        Event::BlockStored { .. } => Py::new(py, BlockStored(cloned))?.into_any(),
        Event::Unkeyable { .. } => Py::new(py, Unkeyable(cloned))?.into_any(),
        Event::BlockRemoved { .. } => Py::new(py, BlockRemoved(cloned))?.into_any(),
        Event::AllBlocksCleared => Py::new(py, AllBlocksCleared(cloned))?.into_any(),
    })
}

fn event_from_py(value: &Bound<'_, PyAny>) -> PyResult<Event> {
    if let Ok(e) = value.cast::<BlockStored>() {
        return Ok(e.get().0.clone());
    }
    if let Ok(e) = value.cast::<Unkeyable>() {
        return Ok(e.get().0.clone());
    }
    if let Ok(e) = value.cast::<BlockRemoved>() {
        return Ok(e.get().0.clone());
    }
    if value.cast::<AllBlocksCleared>().is_ok() {
        return Ok(Event::AllBlocksCleared);
    }
    Err(PyTypeError::new_err("not a KV event"))
}

#[pyclass(frozen, module = "warmstart._routing_core")]
struct Batch(events::Batch);

#[pymethods]
impl Batch {
    #[getter]
    fn ts(&self) -> f64 {
        self.0.ts
    }
    #[getter]
    fn skipped(&self) -> usize {
        self.0.skipped
    }
    #[getter]
    fn events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.0.events.iter().map(|e| event_to_py(py, e)).collect::<PyResult<Vec<_>>>()?)
    }
    #[getter]
    fn cleared(&self) -> bool {
        self.0.events.iter().any(|e| matches!(e, Event::AllBlocksCleared))
    }
    fn __len__(&self) -> usize {
        self.0.events.len()
    }
}

#[pyfunction]
fn decode_batch(py: Python<'_>, payload: &[u8]) -> PyResult<Batch> {
    py.detach(|| guard(|| events::decode_batch(payload).map(Batch).map_err(decode_error)))
}

#[pyfunction]
fn decode_seq(frame: &[u8]) -> PyResult<i64> {
    events::decode_seq(frame).map_err(decode_error)
}

// ---- indexes and shares

fn names_of<'a>(names: &'a [String]) -> Vec<&'a str> {
    names.iter().map(String::as_str).collect()
}

#[pyclass(module = "warmstart._routing_core")]
struct PrefixIndex(textindex::TextIndex);

#[pymethods]
impl PrefixIndex {
    #[new]
    fn new(capacity_blocks: usize) -> Self {
        PrefixIndex(textindex::TextIndex::new(capacity_blocks))
    }
    #[getter]
    fn capacity_blocks(&self) -> usize {
        self.0.capacity_blocks
    }
    #[pyo3(name = "match")]
    fn match_(&mut self, blocks: Vec<u64>, replicas: Vec<String>) -> PyResult<HashMap<String, usize>> {
        guard(|| {
            let index = &mut self.0;
            let found = index.match_names(&blocks, &names_of(&replicas));
            Ok(found.into_iter().map(|(id, depth)| (index.names.name(id).to_owned(), depth)).collect())
        })
    }
    fn record(&mut self, replica: &str, blocks: Vec<u64>) -> PyResult<()> {
        guard(|| Ok(self.0.record(replica, &blocks)))
    }
    fn holders(&self, block: u64) -> PyResult<std::collections::HashSet<String>> {
        guard(|| Ok(self.0.holders(block).into_iter().map(|id| self.0.names.name(id).to_owned()).collect()))
    }
    fn since(&self, replica: &str, block: u64) -> u64 {
        self.0.names.get(replica).map_or(0, |id| self.0.since(id, block))
    }
    fn forget(&mut self, replica: &str) -> PyResult<()> {
        guard(|| Ok(self.0.forget(replica)))
    }
    fn replicas(&self) -> Vec<String> {
        self.0.replicas()
    }
    fn blocks(&self, replica: &str) -> usize {
        self.0.blocks(replica)
    }
    fn total_entries(&self) -> usize {
        self.0.total_entries()
    }
}

#[pyclass(module = "warmstart._routing_core")]
struct EventIndex(eventindex::EventIndex);

#[pymethods]
impl EventIndex {
    #[new]
    fn new(block_size: usize) -> Self {
        EventIndex(eventindex::EventIndex::new(block_size))
    }
    #[getter]
    fn block_size(&self) -> usize {
        self.0.block_size
    }
    #[getter]
    fn orphans(&self) -> u64 {
        self.0.orphans
    }
    #[getter]
    fn mismatched(&self) -> u64 {
        self.0.mismatched
    }
    fn apply(&mut self, replica: &str, event: &Bound<'_, PyAny>) -> PyResult<()> {
        let event = event_from_py(event)?;
        guard(|| Ok(self.0.apply(replica, &event)))
    }
    fn apply_batch(&mut self, replica: &str, batch: &Bound<'_, Batch>) -> PyResult<()> {
        let batch = batch.get();
        guard(|| {
            for event in &batch.0.events {
                self.0.apply(replica, event);
            }
            Ok(())
        })
    }
    fn clear(&mut self, replica: &str) -> PyResult<()> {
        guard(|| Ok(self.0.clear(replica)))
    }
    fn speculate(&mut self, replica: &str, keys: Vec<u64>, expiry: f64) -> PyResult<()> {
        guard(|| Ok(self.0.speculate(replica, &keys, expiry)))
    }
    fn expire(&mut self, now: f64) -> PyResult<()> {
        guard(|| Ok(self.0.expire(now)))
    }
    #[pyo3(name = "match")]
    fn match_(&mut self, keys: Vec<u64>, replicas: Vec<String>, now: f64) -> PyResult<HashMap<String, usize>> {
        guard(|| {
            let index = &mut self.0;
            let found = index.match_names(&keys, &names_of(&replicas), now);
            Ok(found.into_iter().map(|(id, depth)| (index.names.name(id).to_owned(), depth)).collect())
        })
    }
    fn engine_hashes<'py>(&self, py: Python<'py>, replica: &str) -> PyResult<Bound<'py, PySet>> {
        let hashes = self.0.engine_hashes(replica).iter().map(|h| hash_to_py(py, h)).collect::<PyResult<Vec<_>>>()?;
        PySet::new(py, hashes)
    }
    fn keys(&self, replica: &str) -> std::collections::HashSet<u64> {
        self.0.keys(replica).into_iter().collect()
    }
    fn blocks(&self, replica: &str) -> usize {
        self.0.blocks(replica)
    }
    fn holds(&self, replica: &str, key: u64) -> bool {
        self.0.holds(replica, key)
    }
    fn total_entries(&self) -> usize {
        self.0.total_entries()
    }
}

#[pyclass(module = "warmstart._routing_core")]
struct ShareMeter(shares::ShareMeter);

#[pymethods]
impl ShareMeter {
    #[new]
    fn new(window: usize) -> Self {
        ShareMeter(shares::ShareMeter::new(window))
    }
    fn add(&mut self, replica: &str) {
        self.0.add(replica)
    }
    fn recent(&self, replica: &str) -> f64 {
        self.0.recent(replica)
    }
    fn total(&self) -> f64 {
        self.0.total()
    }
    fn forget(&mut self, replica: &str) {
        self.0.forget(replica)
    }
}

#[pyclass(module = "warmstart._routing_core")]
#[derive(Default)]
struct PeerLoads(loads::PeerLoads);

#[pymethods]
impl PeerLoads {
    #[new]
    fn new() -> Self {
        PeerLoads::default()
    }
    fn set(&mut self, peer: &str, counts: HashMap<String, i64>) {
        self.0.set(peer, counts)
    }
    fn forget(&mut self, peer: &str) {
        self.0.forget(peer)
    }
    fn inflight(&self, replica: &str) -> i64 {
        self.0.inflight(replica)
    }
    fn peers(&self) -> Vec<String> {
        self.0.peers()
    }
    fn totals(&self) -> HashMap<String, i64> {
        self.0.totals()
    }
}

// ---- the pickers

fn check_lengths(names: usize, others: &[usize]) -> PyResult<()> {
    if others.iter().any(|&len| len != names) {
        return Err(PyValueError::new_err("every per-replica list has one entry per replica"));
    }
    Ok(())
}

#[pyclass(module = "warmstart._routing_core")]
struct PrefixPicker {
    config: picking::PrefixConfig,
    #[pyo3(get)]
    index: Py<PrefixIndex>,
    #[pyo3(get)]
    shares: Py<ShareMeter>,
}

#[pymethods]
impl PrefixPicker {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (*, cap, epsilon, min_ceiling, block_chars, home_blocks, home_choices, prefill_aware, balance_epsilon, balance_slack, index, shares))]
    fn new(
        cap: Option<i64>,
        epsilon: f64,
        min_ceiling: i64,
        block_chars: usize,
        home_blocks: usize,
        home_choices: usize,
        prefill_aware: bool,
        balance_epsilon: f64,
        balance_slack: f64,
        index: Py<PrefixIndex>,
        shares: Py<ShareMeter>,
    ) -> Self {
        let config = picking::PrefixConfig {
            cap,
            epsilon,
            min_ceiling,
            block_chars,
            home_blocks,
            home_choices,
            prefill_aware,
            balance_epsilon,
            balance_slack,
        };
        PrefixPicker { config, index, shares }
    }

    #[allow(clippy::too_many_arguments)]
    fn choose(
        &self,
        py: Python<'_>,
        names: Vec<String>,
        inflight: Vec<i64>,
        peers: Vec<i64>,
        prefill_chars: Vec<i64>,
        blocks: Vec<u64>,
        anchor: Option<u64>,
        anchor_chars: usize,
        chars: usize,
    ) -> PyResult<Option<(Vec<String>, usize, bool)>> {
        check_lengths(names.len(), &[inflight.len(), peers.len(), prefill_chars.len()])?;
        let views = names_of(&names);
        let mut index = self.index.bind(py).borrow_mut();
        let shares = self.shares.bind(py).borrow();
        guard(|| {
            let fleet = picking::Fleet { names: &views, inflight: &inflight, peers: &peers, prefill_chars: &prefill_chars };
            let key = picking::Key { blocks: &blocks, anchor, anchor_chars, chars };
            Ok(picking::prefix_pick(&self.config, &mut index.0, &shares.0, &fleet, &key).map(|d| {
                (d.candidates.into_iter().map(|i| names[i].clone()).collect(), d.matched, d.spilled)
            }))
        })
    }

    /// This router sent a request with these blocks (and anchor) to `replica`.
    #[pyo3(signature = (replica, blocks, anchor = None))]
    fn placed(&self, py: Python<'_>, replica: &str, mut blocks: Vec<u64>, anchor: Option<u64>) -> PyResult<()> {
        blocks.extend(anchor);
        let mut index = self.index.bind(py).borrow_mut();
        let mut shares = self.shares.bind(py).borrow_mut();
        guard(|| {
            index.0.record(replica, &blocks);
            shares.0.add(replica);
            Ok(())
        })
    }

    /// A peer router sent a request with these blocks (and anchor) to `replica`: the index learns it too.
    #[pyo3(signature = (replica, blocks, anchor = None))]
    fn peer_placed(&self, py: Python<'_>, replica: &str, mut blocks: Vec<u64>, anchor: Option<u64>) -> PyResult<()> {
        blocks.extend(anchor);
        let mut index = self.index.bind(py).borrow_mut();
        guard(|| Ok(index.0.record(replica, &blocks)))
    }

    fn forget(&self, py: Python<'_>, replica: &str) -> PyResult<()> {
        let mut index = self.index.bind(py).borrow_mut();
        let mut shares = self.shares.bind(py).borrow_mut();
        guard(|| {
            index.0.forget(replica);
            shares.0.forget(replica);
            Ok(())
        })
    }
}

#[pyclass(module = "warmstart._routing_core")]
struct EnginePicker {
    config: picking::EngineConfig,
    block_chars: usize,
    chars_per_token: usize,
    ttl: f64,
    #[pyo3(get)]
    events: Py<EventIndex>,
    #[pyo3(get)]
    text: Py<PrefixIndex>,
}

#[pymethods]
impl EnginePicker {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (*, cap, balance_epsilon, balance_slack, block_chars, chars_per_token, ttl, events, text))]
    fn new(
        cap: Option<i64>,
        balance_epsilon: f64,
        balance_slack: f64,
        block_chars: usize,
        chars_per_token: usize,
        ttl: f64,
        events: Py<EventIndex>,
        text: Py<PrefixIndex>,
    ) -> Self {
        let config = picking::EngineConfig { cap, balance_epsilon, balance_slack };
        EnginePicker { config, block_chars, chars_per_token: chars_per_token.max(1), ttl, events, text }
    }

    #[setter]
    fn set_events(&mut self, events: Py<EventIndex>) {
        self.events = events;
    }

    #[allow(clippy::too_many_arguments)]
    fn choose(
        &self,
        py: Python<'_>,
        names: Vec<String>,
        inflight: Vec<i64>,
        peers: Vec<i64>,
        live: Vec<bool>,
        token_keys: Option<Vec<u64>>,
        blocks: Vec<u64>,
        loads: Vec<Option<f64>>,
        rates: Vec<Option<f64>>,
        now: f64,
    ) -> PyResult<(Vec<String>, usize, bool, bool)> {
        check_lengths(names.len(), &[inflight.len(), peers.len(), live.len(), loads.len(), rates.len()])?;
        let views = names_of(&names);
        let mut events = self.events.bind(py).borrow_mut();
        let mut text = self.text.bind(py).borrow_mut();
        guard(|| {
            let n = names.len();
            if n == 0 {
                return Ok((Vec::new(), 0, false, false));
            }
            let token_keys = token_keys.as_deref().filter(|keys| !keys.is_empty());
            let live: Vec<bool> = live.iter().map(|&l| l && token_keys.is_some()).collect();
            let mut matched = vec![0usize; n];
            if let Some(keys) = token_keys {
                let ids: Vec<(usize, u32)> = (0..n).filter(|&i| live[i]).map(|i| (i, events.0.names.id(views[i]))).collect();
                if !ids.is_empty() {
                    let size = events.0.block_size;
                    let only: Vec<u32> = ids.iter().map(|(_, id)| *id).collect();
                    for (id, depth) in events.0.match_ids(keys, &only, now) {
                        if let Some((i, _)) = ids.iter().find(|(_, other)| *other == id) {
                            matched[*i] = depth * size;
                        }
                    }
                }
            }
            let fallback: Vec<usize> = (0..n).filter(|&i| !live[i]).collect();
            if !fallback.is_empty() && !blocks.is_empty() {
                let per_block = self.block_chars / self.chars_per_token;
                let ids: Vec<u32> = fallback.iter().map(|&i| text.0.names.id(views[i])).collect();
                for (id, depth) in text.0.match_ids(&blocks, &ids) {
                    if let Some(position) = ids.iter().position(|&other| other == id) {
                        matched[fallback[position]] = depth * per_block;
                    }
                }
            }
            let seed = token_keys.map(|keys| keys[0]).or_else(|| blocks.first().copied());
            let load: Vec<f64> = (0..n).map(|i| loads[i].unwrap_or((inflight[i] + peers[i]) as f64)).collect();
            let view = picking::EngineView { names: &views, inflight: &inflight, matched_tokens: &matched, load: &load, rates: &rates };
            let (order, spilled) = picking::engine_pick(&self.config, &view, seed);
            let choice = order[0];
            let candidates = order.into_iter().map(|i| names[i].clone()).collect();
            Ok((candidates, matched[choice], live[choice], spilled))
        })
    }

    /// This router sent a request to `replica`: its text blocks enter the text index, its token keys
    /// count as held (speculatively) until the TTL or a confirming event.
    #[pyo3(signature = (replica, blocks, token_keys, now))]
    fn placed(&self, py: Python<'_>, replica: &str, blocks: Vec<u64>, token_keys: Option<Vec<u64>>, now: f64) -> PyResult<()> {
        self.peer_placed(py, replica, blocks, token_keys, now + self.ttl)
    }

    /// A peer router sent a request to `replica`: the same entries, until `expiry` (the peer's pick time + TTL).
    #[pyo3(signature = (replica, blocks, token_keys, expiry))]
    fn peer_placed(&self, py: Python<'_>, replica: &str, blocks: Vec<u64>, token_keys: Option<Vec<u64>>, expiry: f64) -> PyResult<()> {
        let mut events = self.events.bind(py).borrow_mut();
        let mut text = self.text.bind(py).borrow_mut();
        guard(|| {
            text.0.record(replica, &blocks);
            if let Some(keys) = token_keys.filter(|keys| !keys.is_empty()) {
                events.0.speculate(replica, &keys, expiry);
            }
            Ok(())
        })
    }

    fn forget(&self, py: Python<'_>, replica: &str) -> PyResult<()> {
        let mut text = self.text.bind(py).borrow_mut();
        guard(|| Ok(text.0.forget(replica)))
    }
}

#[pymodule]
fn _routing_core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("DecodeError", py.get_type::<DecodeError>())?;
    m.add("CoreError", py.get_type::<CoreError>())?;
    m.add_function(wrap_pyfunction!(block_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(prompt_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(chain_keys, m)?)?;
    m.add_function(wrap_pyfunction!(stable_hash, m)?)?;
    m.add_function(wrap_pyfunction!(rendezvous_order, m)?)?;
    m.add_function(wrap_pyfunction!(load_ceiling, m)?)?;
    m.add_function(wrap_pyfunction!(share_bound, m)?)?;
    m.add_function(wrap_pyfunction!(panics, m)?)?;
    m.add_function(wrap_pyfunction!(check_panic_guard, m)?)?;
    m.add_function(wrap_pyfunction!(decode_batch, m)?)?;
    m.add_function(wrap_pyfunction!(decode_seq, m)?)?;
    m.add_class::<BlockStored>()?;
    m.add_class::<Unkeyable>()?;
    m.add_class::<BlockRemoved>()?;
    m.add_class::<AllBlocksCleared>()?;
    m.add_class::<Batch>()?;
    m.add_class::<PrefixIndex>()?;
    m.add_class::<EventIndex>()?;
    m.add_class::<ShareMeter>()?;
    m.add_class::<PeerLoads>()?;
    m.add_class::<PrefixPicker>()?;
    m.add_class::<EnginePicker>()?;
    Ok(())
}
