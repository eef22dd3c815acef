//! Decode vLLM's KV-cache event batches, tolerating every encoding vLLM has shipped.
//!
//! A batch is the msgpack payload of `(topic, 8-byte big-endian seq, payload)`, in one of two forms:
//! msgspec positional arrays (`[ts, events, rank]`, each event `[tag, field, ...]`, trailing
//! defaults omitted) or maps (`{"ts", "events"}`, each event `{"type": tag, field: value}`). Both
//! levels accept both forms; unknown fields and event types are ignored; block hashes may be
//! integers or bytes. Blocks the router cannot key by token ids alone (a LoRA adapter's, blocks
//! with extra keys, blocks on another medium than the GPU) come back as `Unkeyable`, so that their
//! children are not mistaken for plain prompt blocks. A malformed event is skipped and counted; a
//! payload that is not a batch at all is an error. Nothing here panics on input.

use std::fmt;

use rmpv::Value;

/// Nesting deeper than this is not a KV-event batch.
const MAX_DEPTH: usize = 32;
const STORED_FIELDS: [&str; 7] = ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"];
const STORED_EXTRA_POSITION: usize = 7;
const REMOVED_FIELDS: [&str; 2] = ["block_hashes", "medium"];

/// A block hash as the engine publishes it: an integer by default, raw digest bytes otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EngineHash {
    Int(i128),
    Bytes(Vec<u8>),
}

/// One decoded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Full blocks the engine now holds: `token_ids` covers `block_hashes.len() x block_size` tokens.
    BlockStored { block_hashes: Vec<EngineHash>, parent: Option<EngineHash>, token_ids: Vec<i64>, block_size: usize },
    /// Blocks stored that the router does not index (LoRA, extra keys).
    Unkeyable { block_hashes: Vec<EngineHash> },
    /// Blocks the engine evicted (GPU medium only).
    BlockRemoved { block_hashes: Vec<EngineHash> },
    /// The engine dropped its whole prefix cache.
    AllBlocksCleared,
}

/// One published batch: its publisher timestamp (seconds since the epoch), events, and events skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub ts: f64,
    pub events: Vec<Event>,
    pub skipped: usize,
}

/// The payload is not a KV-event batch in any known encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn error<T>(message: &str) -> Result<T, DecodeError> {
    Err(DecodeError(message.to_owned()))
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(match s.as_str() {
            Some(s) => s.to_owned(),
            None => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        }),
        Value::Binary(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

fn is_nil(value: Option<&Value>) -> bool {
    matches!(value, None | Some(Value::Nil))
}

fn int(value: &Value) -> Option<i128> {
    match value {
        Value::Integer(i) => i.as_i64().map(i128::from).or_else(|| i.as_u64().map(i128::from)),
        _ => None,
    }
}

fn engine_hash(value: &Value) -> Result<EngineHash, DecodeError> {
    match value {
        Value::Integer(_) => Ok(EngineHash::Int(int(value).unwrap_or_default())),
        Value::Binary(b) => Ok(EngineHash::Bytes(b.clone())),
        _ => error("a block hash is neither an integer nor bytes"),
    }
}

fn engine_hashes(value: Option<&Value>) -> Result<Vec<EngineHash>, DecodeError> {
    match value {
        Some(Value::Array(items)) => items.iter().map(engine_hash).collect(),
        _ => error("block_hashes is not a list"),
    }
}

/// An event's fields by name, from its array or map form.
struct Fields<'a> {
    named: Vec<(String, &'a Value)>,
}

impl<'a> Fields<'a> {
    fn of(raw: &'a Value, names: &[&str], extra: bool) -> Fields<'a> {
        let mut named = Vec::new();
        match raw {
            Value::Map(pairs) => {
                for (key, value) in pairs {
                    named.push((text(key).unwrap_or_default(), value));
                }
            }
            Value::Array(items) => {
                let values = &items[1.min(items.len())..];
                for (name, value) in names.iter().zip(values) {
                    named.push(((*name).to_owned(), value));
                }
                if extra && values.len() > STORED_EXTRA_POSITION {
                    named.push(("extra_keys".to_owned(), &values[STORED_EXTRA_POSITION]));
                }
            }
            _ => {}
        }
        Fields { named }
    }

    /// The last value named `name` (a map's later key wins, as in a dict).
    fn get(&self, name: &str) -> Option<&'a Value> {
        self.named.iter().rev().find(|(key, _)| key == name).map(|(_, value)| *value)
    }

    fn medium_is_gpu(&self) -> bool {
        match self.get("medium").and_then(text) {
            None => true,
            Some(medium) => medium == "GPU" || medium == "gpu",
        }
    }
}

fn tag(raw: &Value) -> Option<String> {
    match raw {
        Value::Map(pairs) => pairs.iter().find(|(key, _)| text(key).as_deref() == Some("type")).and_then(|(_, v)| text(v)),
        Value::Array(items) => items.first().and_then(text),
        _ => None,
    }
}

/// One event, `Ok(None)` for an unknown type or a medium other than the GPU (ignored).
pub fn decode_event(raw: &Value) -> Result<Option<Event>, DecodeError> {
    if !matches!(raw, Value::Map(_) | Value::Array(_)) {
        return error("an event is neither an array nor a map");
    }
    match tag(raw).as_deref() {
        Some("BlockStored") => stored(&Fields::of(raw, &STORED_FIELDS, true)),
        Some("BlockRemoved") => {
            let fields = Fields::of(raw, &REMOVED_FIELDS, false);
            if !fields.medium_is_gpu() {
                return Ok(None);
            }
            Ok(Some(Event::BlockRemoved { block_hashes: engine_hashes(fields.get("block_hashes"))? }))
        }
        Some("AllBlocksCleared") => Ok(Some(Event::AllBlocksCleared)),
        _ => Ok(None),
    }
}

fn stored(fields: &Fields<'_>) -> Result<Option<Event>, DecodeError> {
    let block_hashes = engine_hashes(fields.get("block_hashes"))?;
    let gpu = fields.medium_is_gpu();
    let mut keyed = is_nil(fields.get("lora_id")) && is_nil(fields.get("lora_name")) && gpu;
    if let Some(Value::Array(extra)) = fields.get("extra_keys") {
        if extra.iter().any(|e| !e.is_nil()) {
            keyed = false;
        }
    }
    if !keyed {
        return Ok(if gpu { Some(Event::Unkeyable { block_hashes }) } else { None });
    }
    let (Some(Value::Array(tokens)), Some(size)) = (fields.get("token_ids"), fields.get("block_size").and_then(int)) else {
        return error("BlockStored without token_ids or block_size");
    };
    if size <= 0 || size > i128::from(u32::MAX) {
        return error("BlockStored without token_ids or block_size");
    }
    let block_size = size as usize;
    if Some(tokens.len()) != block_hashes.len().checked_mul(block_size) {
        return error("BlockStored token_ids do not fill its blocks");
    }
    let mut token_ids = Vec::with_capacity(tokens.len());
    for token in tokens {
        match token {
            Value::Integer(i) if i.as_i64().is_some() => token_ids.push(i.as_i64().unwrap_or_default()),
            _ => return error("BlockStored token_ids are not 64-bit integers"),
        }
    }
    let parent = match fields.get("parent_block_hash") {
        None | Some(Value::Nil) => None,
        Some(value) => Some(engine_hash(value)?),
    };
    Ok(Some(Event::BlockStored { block_hashes, parent, token_ids, block_size }))
}

/// A whole batch from its msgpack payload.
pub fn decode_batch(payload: &[u8]) -> Result<Batch, DecodeError> {
    let mut reader = payload;
    let raw = match rmpv::decode::read_value_with_max_depth(&mut reader, MAX_DEPTH) {
        Ok(raw) => raw,
        Err(_) => return error("not msgpack"),
    };
    let (ts, events) = match &raw {
        Value::Map(pairs) => {
            let find = |name: &str| pairs.iter().rev().find(|(k, _)| text(k).as_deref() == Some(name)).map(|(_, v)| v);
            (find("ts"), find("events"))
        }
        Value::Array(items) if items.len() >= 2 => (items.first(), items.get(1)),
        _ => return error("a batch is neither an array nor a map"),
    };
    let Some(Value::Array(events)) = events else {
        return error("a batch has no event list");
    };
    let mut decoded = Vec::with_capacity(events.len());
    let mut skipped = 0;
    for item in events {
        match decode_event(item) {
            Ok(Some(event)) => decoded.push(event),
            _ => skipped += 1,
        }
    }
    let ts = match ts {
        Some(Value::F64(f)) => *f,
        Some(Value::F32(f)) => f64::from(*f),
        Some(value @ Value::Integer(_)) => int(value).unwrap_or_default() as f64,
        _ => 0.0,
    };
    Ok(Batch { ts, events: decoded, skipped })
}

/// The 8-byte big-endian sequence number (signed: the replay end marker is -1).
pub fn decode_seq(frame: &[u8]) -> Result<i64, DecodeError> {
    match <[u8; 8]>::try_from(frame) {
        Ok(bytes) => Ok(i64::from_be_bytes(bytes)),
        Err(_) => error("a sequence frame is not 8 bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack(value: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, value).unwrap();
        out
    }

    fn s(text: &str) -> Value {
        Value::from(text)
    }

    fn ints(values: &[i64]) -> Value {
        Value::Array(values.iter().map(|&v| Value::from(v)).collect())
    }

    #[test]
    fn array_and_map_forms_decode_alike() {
        let tokens: Vec<i64> = (0..4).collect();
        let array = Value::Array(vec![
            Value::F64(1.5),
            Value::Array(vec![Value::Array(vec![s("BlockStored"), ints(&[1, 2]), Value::Nil, ints(&tokens), Value::from(2)])]),
        ]);
        let map = Value::Map(vec![
            (s("ts"), Value::F64(1.5)),
            (
                s("events"),
                Value::Array(vec![Value::Map(vec![
                    (s("type"), s("BlockStored")),
                    (s("block_hashes"), ints(&[1, 2])),
                    (s("token_ids"), ints(&tokens)),
                    (s("block_size"), Value::from(2)),
                    (s("future_field"), Value::from(7)),
                ])]),
            ),
        ]);
        let a = decode_batch(&pack(&array)).unwrap();
        assert_eq!(a, decode_batch(&pack(&map)).unwrap());
        assert_eq!(a.ts, 1.5);
        assert_eq!(
            a.events,
            vec![Event::BlockStored {
                block_hashes: vec![EngineHash::Int(1), EngineHash::Int(2)],
                parent: None,
                token_ids: tokens,
                block_size: 2
            }]
        );
    }

    #[test]
    fn lora_extra_keys_and_other_media_are_not_keyed() {
        let lora = Value::Array(vec![s("BlockStored"), ints(&[1]), Value::Nil, ints(&[1, 2]), Value::from(2), Value::from(3)]);
        let cpu = Value::Array(vec![s("BlockStored"), ints(&[1]), Value::Nil, ints(&[1, 2]), Value::from(2), Value::Nil, s("CPU")]);
        let extra = Value::Array(vec![
            s("BlockStored"), ints(&[1]), Value::Nil, ints(&[1, 2]), Value::from(2), Value::Nil, Value::Nil, Value::Nil,
            Value::Array(vec![s("mm-hash")]),
        ]);
        assert_eq!(decode_event(&lora).unwrap(), Some(Event::Unkeyable { block_hashes: vec![EngineHash::Int(1)] }));
        assert_eq!(decode_event(&cpu).unwrap(), None);
        assert_eq!(decode_event(&extra).unwrap(), Some(Event::Unkeyable { block_hashes: vec![EngineHash::Int(1)] }));
    }

    #[test]
    fn malformed_events_are_skipped_and_malformed_batches_refused() {
        let batch = Value::Array(vec![
            Value::from(0),
            Value::Array(vec![
                Value::Array(vec![s("BlockStored"), ints(&[1, 2]), Value::Nil, ints(&[1, 2, 3]), Value::from(2)]),
                Value::Array(vec![s("BlockStored"), ints(&[1]), Value::Nil, Value::Array(vec![s("x"), s("y")]), Value::from(2)]),
                Value::Array(vec![s("BlockRemoved"), s("not a list")]),
                Value::Array(vec![s("SomethingNew")]),
                Value::from(5),
                Value::Array(vec![s("AllBlocksCleared")]),
            ]),
        ]);
        let decoded = decode_batch(&pack(&batch)).unwrap();
        assert_eq!(decoded.events, vec![Event::AllBlocksCleared]);
        assert_eq!(decoded.skipped, 5);
        assert!(decode_batch(b"\xc1").is_err(), "not msgpack");
        assert!(decode_batch(&pack(&Value::from(3))).is_err());
        assert!(decode_batch(&pack(&Value::Array(vec![Value::from(0), Value::from(1)]))).is_err());
        let mut deep = vec![0x91u8; 100_000];
        deep.push(0x90);
        assert!(decode_batch(&deep).is_err(), "deep nesting is refused, not a stack overflow");
        assert!(decode_batch(b"\xdd\xff\xff\xff\xff").is_err(), "a huge declared length with no data");
    }

    #[test]
    fn bytes_hashes_and_sequence_frames() {
        let event = Value::Array(vec![s("BlockRemoved"), Value::Array(vec![Value::Binary(vec![1, 2])])]);
        assert_eq!(decode_event(&event).unwrap(), Some(Event::BlockRemoved { block_hashes: vec![EngineHash::Bytes(vec![1, 2])] }));
        assert_eq!(decode_seq(&(-1i64).to_be_bytes()).unwrap(), -1);
        assert!(decode_seq(b"short").is_err());
    }
}
