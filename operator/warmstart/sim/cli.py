"""`warmstart sim`: run N simulated vLLM replicas as asyncio servers in one process.

    warmstart sim --replicas 8 --base-port 9000 [--time-scale 0.25] [--cache-tokens 65536] [--model-dir DIR]
                  [--tokenizer DIR] [--kv-events-config '{"enable_kv_cache_events": true, ...}']

Replica i listens on base-port + i and is named ``r<i>``. With ``--model-dir``, the replicas listen at once but
answer ``/health`` with 503 until every weight file has been read (see :mod:`warmstart.sim.loading`); a missing or
incomplete model directory ends the process with exit code 1, as a real server that cannot load its model.
``--kv-events-config`` takes vLLM's JSON and publishes each replica's KV-cache events (replica i adds i to the
ports, as vLLM's data-parallel ranks do); ``--tokenizer`` makes the replicas tokenize with a model's
``tokenizer.json`` and chat template instead of the built-in 4-characters-per-token tokenizer.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import pathlib
import signal

from warmstart.router.tokenizing import ModelTokenizer
from warmstart.sim import loading
from warmstart.sim.engine import EngineParams
from warmstart.sim.kvpublishing import KVEventsConfig, Publisher
from warmstart.sim.server import SimReplica, serve

log = logging.getLogger("warmstart.sim")


def parser() -> argparse.ArgumentParser:
    defaults = EngineParams()
    p = argparse.ArgumentParser(prog="warmstart sim", description="Simulated vLLM replicas with prefix caching.")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--base-port", type=int, default=9000)
    p.add_argument("--name-prefix", default="r", help="replica i is named <prefix><i>")
    p.add_argument("--prefill-tokens-per-s", type=float, default=defaults.prefill_tokens_per_s)
    p.add_argument("--decode-tokens-per-s", type=float, default=defaults.decode_tokens_per_s)
    p.add_argument("--ttft-overhead-s", type=float, default=defaults.ttft_overhead_s)
    p.add_argument("--max-running", type=int, default=defaults.max_running)
    p.add_argument("--block-tokens", type=int, default=defaults.block_tokens)
    p.add_argument("--cache-tokens", type=int, default=defaults.cache_tokens)
    p.add_argument(
        "--time-scale",
        type=float,
        default=defaults.time_scale,
        help="real seconds per model second (0.25 = 4x faster than real time; 0 = no sleeping)",
    )
    p.add_argument(
        "--scale-factor",
        type=int,
        default=1,
        help="make each replica N times larger (cache, prefill rate, slots): the ideal bound",
    )
    p.add_argument("--stream-chunk-tokens", type=int, default=1, help="tokens per SSE chunk after the first")
    p.add_argument(
        "--model-dir",
        type=pathlib.Path,
        default=None,
        help="read every weight file here before reporting ready (checked against the preload manifest)",
    )
    p.add_argument(
        "--kv-events-config",
        type=KVEventsConfig.from_json,
        default=None,
        help="vLLM's KV events JSON, e.g. "
        '\'{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558"}\'',
    )
    p.add_argument("--tokenizer", type=pathlib.Path, default=None, help="directory with tokenizer.json")
    p.add_argument("--log-level", default="INFO")
    return p


def params_from(args: argparse.Namespace) -> EngineParams:
    params = EngineParams(
        prefill_tokens_per_s=args.prefill_tokens_per_s,
        decode_tokens_per_s=args.decode_tokens_per_s,
        ttft_overhead_s=args.ttft_overhead_s,
        max_running=args.max_running,
        block_tokens=args.block_tokens,
        cache_tokens=args.cache_tokens,
        time_scale=args.time_scale,
    )
    return params.scaled(args.scale_factor) if args.scale_factor > 1 else params


async def run(args: argparse.Namespace) -> int:
    params = params_from(args)
    runners, replicas, publishers = [], [], []
    tokenizer = ModelTokenizer.from_dir(args.tokenizer) if args.tokenizer is not None else None
    events: KVEventsConfig | None = args.kv_events_config
    for i in range(args.replicas):
        publisher = Publisher(events, offset=i) if events is not None and events.publishing else None
        if publisher is not None:
            publisher.start()
            publishers.append(publisher)
            log.info(
                "replica %d publishes KV events on %s (replay %s)", i, publisher.endpoint, publisher.replay_endpoint
            )
        replica = SimReplica(
            f"{args.name_prefix}{i}",
            params,
            stream_chunk_tokens=args.stream_chunk_tokens,
            tokenizer=tokenizer,
            publisher=publisher,
        )
        replica.ready = args.model_dir is None
        runner, port = await serve(replica, args.host, args.base_port + i)
        runners.append(runner)
        replicas.append(replica)
        log.info("replica %s on http://%s:%d", replica.name, args.host, port)
    if args.model_dir is not None:
        try:
            report = await asyncio.get_running_loop().run_in_executor(None, loading.load, args.model_dir)
        except (loading.WeightsError, OSError) as exc:
            log.error("cannot load the model from %s: %s", args.model_dir, exc)
            for runner in runners:
                await runner.cleanup()
            return 1
        log.info(
            "loaded %d files, %d bytes in %.2f s (%s)",
            report.files,
            report.bytes,
            report.seconds,
            "checked against the preload manifest" if report.manifest else "no manifest",
        )
        for replica in replicas:
            replica.ready = True
    print(
        f"sim: {args.replicas} replicas ready on ports {args.base_port}-{args.base_port + args.replicas - 1}",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for runner in runners:
        await runner.cleanup()
    for publisher in publishers:
        await publisher.close()
    return 0


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import uvloop  # a faster event loop when installed; asyncio's otherwise
    except ImportError:
        return asyncio.run(run(args))
    return int(uvloop.run(run(args)))
