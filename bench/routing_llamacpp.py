"""Routing on real engines: llama.cpp's server with prompt caching behind each router, all on loopback.

    python bench/routing.py --fleet llamacpp [--engines 2] [--runs 3] [--workloads documents chat]

Fleet: ``--engines`` llama-server processes (the engine image's own binary, see
``warmstart.localcluster.imaging.engine_binary``), one thread and one slot each, prompt caching on with a
bounded host-memory prompt cache (``--cache-ram``), serving SmolLM2-135M-Instruct. Every engine is restarted
before each run, so each router starts from empty caches. Routers, one process each: warmstart prefixaware,
random and roundrobin, and SGLang cache_aware. Workloads: ``documents`` (shared document prefixes of about
1,000 tokens with short questions; open loop at ``--rate``, or ``--concurrency`` clients in a closed loop) and
``chat`` (multi-turn conversations, closed loop per user).

Per request the client measures TTFT and reads what the engine reports in its last streamed event: ``prompt_n``
(prompt tokens computed) and ``cache_n`` (prompt tokens reused); the hit ratio is reused / (reused + computed).
Which engine answered is its ``model`` field (each engine has its own alias). Writes raw per-request data and the
summary to ``--results`` (JSON) and prints one table per workload: medians over runs, with min-max spread.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

import fleets
import loading
from warmstart.localcluster import enginemodel, imaging

ROUTERS = (
    "warmstart prefixaware",
    "warmstart random",
    "warmstart roundrobin",
    "sglang cache_aware",
    "warmstart prefixaware x2-sync",
)
#: a label ending so runs that many router processes sharing their picks (peer sync); clients spread at random
SYNCED = " x2-sync"
WORDS = [
    *("cache", "node", "weights", "replica", "prefix", "engine", "token", "router", "prompt", "model", "server"),
    *("kernel", "memory", "disk", "queue", "batch", "shard", "tensor", "layer", "block", "stream", "latency"),
    *("throughput", "request", "answer", "question", "document", "context"),
]


@dataclass
class Sample:
    """One request as the client saw it and the engine reported it."""

    workload: str
    group: int
    sent: float
    ttft: float | None
    engine: str
    prompt_n: int
    cache_n: int
    error: str = ""
    prompt_ms: float = 0.0
    """The engine's own prefill time for this request (``timings.prompt_ms``)."""
    predicted_per_second: float = 0.0
    chars: int = 0
    """Characters of the prompt (the simulator counts 4 per token)."""


def document(group: int, words: int) -> str:
    rng = random.Random(1000 + group)
    body = " ".join(rng.choice(WORDS) for _ in range(words))
    return f"Document {group}. {body}\n"


def documents_workload(groups: int, per_group: int, words: int, seed: int) -> list[tuple[int, str]]:
    """(group, prompt) in a shuffled order: each group's document followed by one of its short questions."""
    rng = random.Random(seed)
    items = [
        (g, f"{document(g, words)}Question {q}: which word comes {q + 1}th in document {g}?\nAnswer:")
        for g in range(groups)
        for q in range(per_group)
    ]
    rng.shuffle(items)
    return items


async def ask(session: aiohttp.ClientSession, url: str, prompt: str, max_tokens: int) -> tuple[Any, ...]:
    """Stream one completion; (ttft, engine alias, timings, reply text)."""
    body = {
        "model": enginemodel.MODEL_NAME,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    started = time.perf_counter()
    ttft = None
    engine, timings, text = "", {}, []
    async with session.post(url + "/v1/completions", json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"http {response.status}: {(await response.text())[:200]}")
        async for line in response.content:
            if not line.startswith(b"data: {"):
                continue
            event = json.loads(line[6:])
            if ttft is None and event.get("choices"):
                ttft = time.perf_counter() - started
            engine = event.get("model") or engine
            timings = event.get("timings") or timings
            for choice in event.get("choices") or []:
                text.append(choice.get("text") or "")
    return ttft, engine, timings, "".join(text)


def sample(workload: str, group: int, sent: float, prompt: str, answer: tuple[Any, ...]) -> Sample:
    ttft, engine, timings, _ = answer
    return Sample(
        workload,
        group,
        sent,
        ttft,
        engine,
        int(timings.get("prompt_n", 0)),
        int(timings.get("cache_n", 0)),
        prompt_ms=float(timings.get("prompt_ms", 0.0)),
        predicted_per_second=float(timings.get("predicted_per_second", 0.0)),
        chars=len(prompt),
    )


async def run_documents(
    session: aiohttp.ClientSession, urls: list[str], args: argparse.Namespace, seed: int
) -> list[Sample]:
    items = documents_workload(args.groups, args.per_group, args.doc_words, seed)
    rng = random.Random(seed)
    spread = random.Random(seed + 1)  # which router a request reaches (one unless several share their picks)
    samples: list[Sample] = []
    start = time.perf_counter()

    async def one(group: int, prompt: str) -> None:
        sent = time.perf_counter() - start
        try:
            answer = await ask(session, spread.choice(urls), prompt, args.max_tokens)
            samples.append(sample("documents", group, sent, prompt, answer))
        except (TimeoutError, aiohttp.ClientError, RuntimeError, ValueError) as error:
            samples.append(Sample("documents", group, sent, None, "", 0, 0, type(error).__name__))

    if args.concurrency > 0:  # closed loop: each client sends its next request when its last one is answered
        queue = list(reversed(items))

        async def client() -> None:
            while queue:
                await one(*queue.pop())

        await asyncio.gather(*(client() for _ in range(args.concurrency)))
        return samples
    tasks = []
    for group, prompt in items:
        tasks.append(asyncio.create_task(one(group, prompt)))
        await asyncio.sleep(rng.expovariate(args.rate))
    await asyncio.gather(*tasks)
    return samples


async def run_chat(
    session: aiohttp.ClientSession, urls: list[str], args: argparse.Namespace, seed: int
) -> list[Sample]:
    rng = random.Random(seed)
    spread = random.Random(seed + 1)
    samples: list[Sample] = []
    start = time.perf_counter()

    async def user(index: int) -> None:
        history = f"System: you are assistant {index}. {document(100 + index, args.chat_system_words)}\n"
        await asyncio.sleep(rng.uniform(0, args.chat_think))
        for turn in range(args.chat_turns):
            history += f"User: question {turn} about item {rng.choice(WORDS)}?\nAssistant:"
            sent = time.perf_counter() - start
            try:
                answer = await ask(session, spread.choice(urls), history, args.max_tokens)
                samples.append(sample("chat", index, sent, history, answer))
                history += answer[3] + "\n"
            except (TimeoutError, aiohttp.ClientError, RuntimeError, ValueError) as error:
                samples.append(Sample("chat", index, sent, None, "", 0, 0, type(error).__name__))
            await asyncio.sleep(rng.expovariate(1.0 / args.chat_think))

    await asyncio.gather(*(user(i) for i in range(args.chat_users)))
    return samples


def summarize(samples: list[Sample], engines: int) -> dict[str, float]:
    ok = [s for s in samples if s.ttft is not None]
    ttfts = sorted(s.ttft for s in ok if s.ttft is not None)
    prompt = sum(s.prompt_n + s.cache_n for s in ok)
    share: dict[str, int] = {}
    for s in ok:
        share[s.engine] = share.get(s.engine, 0) + 1
    counts = [share.get(name, 0) for name in sorted(share)] + [0] * max(0, engines - len(share))
    span = max(s.sent for s in samples) if samples else 0.0
    finished = max((s.sent + (s.ttft or 0.0) for s in ok), default=0.0)

    def q(p: float) -> float:
        return ttfts[min(len(ttfts) - 1, int(p * len(ttfts)))] if ttfts else float("nan")

    return {
        "requests": len(samples),
        "errors": len(samples) - len(ok),
        "ttft_p50": q(0.50),
        "ttft_p95": q(0.95),
        "ttft_p99": q(0.99),
        "requests_per_s": len(ok) / max(finished, span, 1e-9),
        "hit_ratio": sum(s.cache_n for s in ok) / prompt if prompt else 0.0,
        "max_mean_share": max(counts) / (sum(counts) / len(counts)) if counts and sum(counts) else float("nan"),
    }


#: KV cache bytes per token of SmolLM2-135M: 30 layers x 3 KV heads x 64 dims x (K, V) x 2 bytes (f16)
KV_BYTES_PER_TOKEN = 30 * 3 * 64 * 2 * 2
CALIBRATED_ROUTERS = ("warmstart prefixaware", "warmstart random")


def sim_params(samples: list[Sample], args: argparse.Namespace) -> dict[str, float]:
    """``warmstart sim``'s constants from what the engines measured on the same workload (its model stays vLLM's).

    The simulator counts 4 characters per token; the real tokenizer's count converts the engine's rates and cache
    capacity into the simulator's tokens. The first token's fixed cost is one decode step.
    """
    ok = [s for s in samples if s.ttft is not None and s.workload == "documents"]
    computed = [s for s in ok if s.prompt_n >= 64 and s.prompt_ms > 0]
    real_tokens = sum(s.prompt_n + s.cache_n for s in ok)
    sim_per_real = sum(s.chars for s in ok) / 4 / real_tokens
    prefill = sum(s.prompt_n for s in computed) / (sum(s.prompt_ms for s in computed) / 1000)
    decode = statistics.median(s.predicted_per_second for s in ok if s.predicted_per_second > 0)
    cache_real = args.cache_ram * 2**20 / KV_BYTES_PER_TOKEN + args.ctx_size
    return {
        "prefill_tokens_per_s": prefill * sim_per_real,
        "decode_tokens_per_s": decode * sim_per_real,
        "ttft_overhead_s": 1.0 / decode,
        "max_running": 1,
        "cache_tokens": int(cache_real * sim_per_real),
        "sim_tokens_per_real_token": sim_per_real,
    }


async def calibrate(
    session: aiohttp.ClientSession, params: dict[str, float], args: argparse.Namespace, logs: Path
) -> dict[str, list[dict[str, float]]]:
    """The documents workload on ``warmstart sim`` replicas with ``params``, behind the same warmstart routers."""
    base = fleets.free_block(args.engines)
    flags = [
        *("--prefill-tokens-per-s", f"{params['prefill_tokens_per_s']:.3f}"),
        *("--decode-tokens-per-s", f"{params['decode_tokens_per_s']:.3f}"),
        *("--ttft-overhead-s", f"{params['ttft_overhead_s']:.5f}"),
        *("--max-running", "1", "--cache-tokens", str(int(params["cache_tokens"]))),
    ]
    proc = fleets.spawn("sim-calibrated", fleets.sim_argv(args.engines, base, flags), logs)
    urls = [f"http://{fleets.HOST}:{base + i}" for i in range(args.engines)]
    out: dict[str, list[dict[str, float]]] = {}
    try:
        for url in urls:
            await fleets.wait_http(session, url + "/health", proc)
        for run in range(args.runs):
            for label in CALIBRATED_ROUTERS:
                await loading.reset_replicas(session, urls)
                before = await loading.replica_counters(session, urls)
                router = await start_router(session, label, urls, logs)
                try:
                    samples = await run_documents(session, router.urls, args, seed=run)
                finally:
                    router.stop()
                after = await loading.replica_counters(session, urls)
                queries = sum(after[u][0] - before[u][0] for u in urls)
                hits = sum(after[u][1] - before[u][1] for u in urls)
                summary = {**summarize(samples, args.engines), "hit_ratio": hits / queries if queries else 0.0}
                out.setdefault(label, []).append(summary)
                print(f"run {run} sim       {label:22} {_line(summary)}", flush=True)
    finally:
        proc.stop()
    return out


def calibration_errors(real: dict[str, Any], sim: dict[str, Any]) -> dict[str, dict[str, float]]:
    """(sim - real) / real of each router's median p50 and p95 TTFT; sim - real of its hit ratio."""
    errors = {}
    for label in sim:
        if label not in real:
            continue
        errors[label] = {
            key: (sim[label][key]["median"] - real[label][key]["median"]) / real[label][key]["median"]
            for key in ("ttft_p50", "ttft_p95")
        }
        errors[label]["hit_ratio_difference"] = sim[label]["hit_ratio"]["median"] - real[label]["hit_ratio"]["median"]
    return errors


class Engines:
    """The llama-server processes; restarted (empty caches) before each run."""

    def __init__(self, binary: Path, count: int, logs: Path, args: argparse.Namespace) -> None:
        self.binary, self.count, self.logs, self.args = binary, count, logs, args
        self.ports = [fleets.free_port() for _ in range(count)]
        self.procs: list[fleets.Proc] = []

    @property
    def urls(self) -> list[str]:
        return [f"http://{fleets.HOST}:{port}" for port in self.ports]

    async def restart(self, session: aiohttp.ClientSession) -> None:
        self.stop()
        model = enginemodel.gguf()
        for index, port in enumerate(self.ports):
            argv = [
                str(self.binary),
                "--host",
                fleets.HOST,
                "--port",
                str(port),
                "--model",
                str(model),
                # the first alias (sorted) names the engine in responses; the second is the one clients ask for
                "--alias",
                f"e{index},{enginemodel.MODEL_NAME}",
                "--threads",
                "1",
                "--threads-batch",
                "1",
                "--parallel",
                "1",
                "--ctx-size",
                str(self.args.ctx_size),
                "--cache-ram",
                str(self.args.cache_ram),
                "--metrics",
                "--no-webui",
            ]
            self.procs.append(fleets.spawn(f"llama-server-{index}", argv, self.logs))
        for url, proc in zip(self.urls, self.procs, strict=True):
            await fleets.wait_http(session, url + "/health", proc, timeout=120)

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()
        self.procs = []


async def start_router(session: aiohttp.ClientSession, label: str, urls: list[str], logs: Path) -> Any:
    kind, strategy = label.removesuffix(SYNCED).split(" ", 1)
    if kind == "sglang":
        return await fleets.start_sglang(session, strategy, urls, logs)
    if not label.endswith(SYNCED):
        return await fleets.start_warmstart(session, strategy, urls, logs)
    first, *more = fleets.sync_args(2, logs)
    router = await fleets.start_warmstart(session, strategy, urls, logs, args=first)
    for flags in more:
        router.peers.append(await fleets.start_warmstart(session, strategy, urls, logs, args=flags))
    await asyncio.sleep(1.0)  # the peers' first heartbeats: each router has heard from the other
    return router


async def main_async(args: argparse.Namespace) -> int:
    binary = imaging.engine_binary()
    load_before = os.getloadavg()
    logs = Path(args.out) / "logs" / "llamacpp"
    routers = [r for r in ROUTERS if r in (args.routers or ROUTERS)]
    if fleets.sglang_available() is not None:
        routers = [r for r in routers if not r.startswith("sglang")]
    timeout = aiohttp.ClientTimeout(total=600)
    raw: list[dict[str, Any]] = []
    summaries: dict[str, dict[str, list[dict[str, float]]]] = {}
    async with aiohttp.ClientSession(timeout=timeout) as session:
        engines = Engines(binary, args.engines, logs, args)
        try:
            for run in range(args.runs):
                for workload in args.llamacpp_workloads:
                    for label in routers if run % 2 == 0 else list(reversed(routers)):
                        await engines.restart(session)
                        router = await start_router(session, label, engines.urls, logs)
                        try:
                            runner = run_documents if workload == "documents" else run_chat
                            samples = await runner(session, router.urls, args, seed=run)
                        finally:
                            router.stop()
                        summary = summarize(samples, args.engines)
                        summaries.setdefault(workload, {}).setdefault(label, []).append(summary)
                        raw.extend({"run": run, "router": label, **asdict(s)} for s in samples)
                        print(f"run {run} {workload:9} {label:22} {_line(summary)}", flush=True)
        finally:
            engines.stop()
        report = {w: {label: _median(runs) for label, runs in per.items()} for w, per in summaries.items()}
        calibration: dict[str, Any] = {}
        if "documents" in report and not args.skip_calibration:
            params = sim_params(
                [Sample(**{k: v for k, v in r.items() if k not in ("run", "router")}) for r in raw], args
            )
            print(f"\nwarmstart sim, calibrated from the engines' own timings: {params}", flush=True)
            sim_runs = await calibrate(session, params, args, logs)
            sim_report = {label: _median(runs) for label, runs in sim_runs.items()}
            calibration = {
                "params": params,
                "runs": sim_runs,
                "summary": sim_report,
                "errors": calibration_errors(report["documents"], sim_report),
            }
    _print(report)
    if calibration:
        print("\nwarmstart sim vs the engines on the documents workload ((sim - real) / real; hit ratio: sim - real)")
        for label, found in calibration["errors"].items():
            print(
                f"{label:24} p50 {found['ttft_p50']:+.0%}  p95 {found['ttft_p95']:+.0%}  "
                f"hit ratio {found['hit_ratio_difference']:+.2f}"
            )
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(
        json.dumps(
            {
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "command": ["python", "bench/routing.py", *sys.argv[1:]],
                "commit": _commit(),
                "cores": os.cpu_count(),
                "load_average": {"start": load_before, "end": os.getloadavg()},
                "settings": {k: v for k, v in vars(args).items() if k not in ("results", "out")},
                "engine": {"binary": binary.name, "model": enginemodel.GGUF},
                "summary": report,
                "runs": summaries,
                "calibration": calibration,
                "requests": raw,
            },
            indent=1,
        )
    )
    print(f"raw data: {results}")
    return 0


def _commit() -> str:
    done = subprocess.run(
        ["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip()


def _line(summary: dict[str, float]) -> str:
    return (
        f"p50 {summary['ttft_p50'] * 1000:6.0f} ms  p95 {summary['ttft_p95'] * 1000:6.0f}  "
        f"p99 {summary['ttft_p99'] * 1000:6.0f}  {summary['requests_per_s']:5.2f} req/s  "
        f"hit {summary['hit_ratio']:.2f}  max/mean {summary['max_mean_share']:.2f}  errors {summary['errors']:.0f}"
    )


def _median(runs: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out


def _print(report: dict[str, dict[str, dict[str, Any]]]) -> None:
    for workload, per in report.items():
        print(f"\n{workload}: median over runs [min-max]")
        print(f"{'router':24} {'p50 ms':>18} {'p95 ms':>18} {'p99 ms':>18} {'req/s':>8} {'hit':>13} {'max/mean':>9}")
        for label, row in per.items():

            def ms(key: str, row: dict[str, Any] = row) -> str:
                r = row[key]
                return f"{r['median'] * 1000:6.0f} [{r['min'] * 1000:.0f}-{r['max'] * 1000:.0f}]"

            hit = row["hit_ratio"]
            print(
                f"{label:24} {ms('ttft_p50'):>18} {ms('ttft_p95'):>18} {ms('ttft_p99'):>18} "
                f"{row['requests_per_s']['median']:8.2f} "
                f"{hit['median']:.2f} [{hit['min']:.2f}-{hit['max']:.2f}] {row['max_mean_share']['median']:9.2f}"
            )
        base = per.get("warmstart random")
        mine = per.get("warmstart prefixaware")
        sglang = per.get("sglang cache_aware")
        if base and mine:
            ratio = mine["ttft_p50"]["median"] / base["ttft_p50"]["median"]
            print(f"prefixaware p50 / random p50 = {ratio:.2f} (goal <= 0.3)")
        if sglang and mine:
            ratio = mine["ttft_p99"]["median"] / sglang["ttft_p99"]["median"]
            print(f"prefixaware p99 / sglang cache_aware p99 = {ratio:.2f} (goal <= 1)")
        synced = per.get("warmstart prefixaware" + SYNCED)
        if sglang and synced:
            for key in ("ttft_p50", "ttft_p99"):
                ratio = synced[key]["median"] / sglang[key]["median"]
                print(f"2 synced prefixaware routers / one sglang cache_aware, {key[5:]}: {ratio:.2f} (goal <= 1)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--fleet llamacpp")
    group.add_argument("--engines", type=int, default=2, help="llama-server processes (2-4 on 2 cores)")
    group.add_argument("--runs", type=int, default=3, help="repetitions; the table shows medians and the spread")
    group.add_argument("--groups", type=int, default=8, help="documents")
    group.add_argument("--per-group", type=int, default=6, help="questions per document")
    group.add_argument("--doc-words", type=int, default=700, help="words per document (~1.4 tokens each)")
    group.add_argument("--rate", type=float, default=0.5, help="documents workload: requests per second")
    group.add_argument(
        "--concurrency",
        type=int,
        default=0,
        help="documents workload: N clients in a closed loop instead of --rate's open loop (0: open loop)",
    )
    group.add_argument("--max-tokens", type=int, default=8)
    group.add_argument("--chat-users", type=int, default=6)
    group.add_argument("--chat-turns", type=int, default=5)
    group.add_argument("--chat-think", type=float, default=2.0, help="mean seconds between a user's turns")
    group.add_argument("--chat-system-words", type=int, default=300)
    group.add_argument("--ctx-size", type=int, default=4096)
    group.add_argument("--cache-ram", type=int, default=64, help="MiB of host-memory prompt cache per engine")
    group.add_argument("--skip-calibration", action="store_true", help="no warmstart sim run on the same workload")
    group.add_argument("--llamacpp-workloads", dest="llamacpp_workloads", nargs="*", default=["documents", "chat"])
    default = Path(__file__).resolve().parent / "results" / f"{datetime.date.today()}-routing-llamacpp.json"
    group.add_argument("--results", default=str(default), help="where the raw data goes")
