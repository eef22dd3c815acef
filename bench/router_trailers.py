"""The router's resident memory under one connection of trailer fields (8 KB fields, and tiny ``a:b`` fields).

    python bench/router_trailers.py [--source OTHER_TREE/operator] [--seconds 12] [--max-growth-mib 768]

Starts a real ``warmstart router`` (from ``--source`` when given, e.g. an older tree, else this
one) in front of a replica that answers any request, opens one connection, sends a chunked body
and then trailer fields as fast as the router takes them, for ``--seconds`` or until the router
closes the connection or has grown by ``--max-growth-mib`` (the attack is stopped there so that a
router without limits does not take the machine down). Samples the router's RSS every 0.1 s and
writes bench/results/<date>-router-trailers.json (appending one entry per run).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "router"))

from routerprocess import MIB, free_port

BODY = b'{"prompt": "hello"}'
HEAD = (
    b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n0\r\n" % (len(BODY), BODY)
)
FIELDS = {"8KB": b"X-Pad: " + b"p" * 8192 + b"\r\n", "a:b": b"a:b\r\n"}


async def attack(port: int, proc: psutil.Process, field: bytes, seconds: float, max_growth: int) -> dict[str, object]:
    before = proc.memory_info().rss
    peak, sent, started = before, 0, time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HEAD)
    batch = field * (MIB // len(field))
    outcome = "sent everything"
    try:
        while time.monotonic() - started < seconds:
            writer.write(batch)
            await asyncio.wait_for(writer.drain(), timeout=30)
            sent += len(batch)
            peak = max(peak, proc.memory_info().rss)
            if peak - before > max_growth:
                outcome = f"stopped at +{max_growth // MIB} MiB"
                break
    except (ConnectionError, TimeoutError) as exc:
        outcome = f"connection ended ({type(exc).__name__})"
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
        status = head.split(b" ", 2)[1].decode()
    except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
        status = "none"
    peak = max(peak, proc.memory_info().rss)
    writer.close()
    return {
        "rss_before_mib": round(before / MIB, 1),
        "rss_peak_mib": round(peak / MIB, 1),
        "growth_mib": round((peak - before) / MIB, 1),
        "sent_mib": round(sent / MIB, 1),
        "seconds": round(time.monotonic() - started, 1),
        "status": status,
        "outcome": outcome,
    }


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    backend_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", backend_port).start()
    results: dict[str, object] = {}
    env = dict(os.environ)
    if args.source:
        env["PYTHONPATH"] = args.source
    try:
        for name, field in FIELDS.items():  # a fresh router per kind of field
            port, admin = free_port(), free_port()
            argv = [sys.executable, "-m", "warmstart.cli", "router", "--host", "127.0.0.1", "--port", str(port)]
            argv += ["--admin-port", str(admin), "--backends", f"http://127.0.0.1:{backend_port}"]
            child = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)
            try:
                await asyncio.sleep(0.5)
                for _ in range(100):
                    try:
                        _, w = await asyncio.open_connection("127.0.0.1", port)
                        w.close()
                        break
                    except OSError:
                        await asyncio.sleep(0.1)
                await asyncio.sleep(0.5)
                results[name] = await attack(
                    port, psutil.Process(child.pid), field, args.seconds, args.max_growth_mib * MIB
                )
                print(name, results[name], flush=True)
            finally:
                child.kill()
                child.wait()
    finally:
        await runner.cleanup()
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", help="PYTHONPATH holding the warmstart package to run (default: this tree's)")
    p.add_argument("--label", default="this tree")
    p.add_argument("--seconds", type=float, default=12.0)
    p.add_argument("--max-growth-mib", type=int, default=768)
    args = p.parse_args()
    load_before = os.getloadavg()
    results = asyncio.run(main_async(args))
    out = Path(__file__).resolve().parent / "results" / f"{datetime.date.today()}-router-trailers.json"
    runs = json.loads(out.read_text()) if out.exists() else []
    repo = Path(args.source or Path(__file__).resolve().parents[1])
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    runs.append(
        {
            "label": args.label,
            "command": " ".join(["python", *sys.argv]),
            "commit": commit.stdout.strip(),
            "source": args.source,
            "seconds": args.seconds,
            "max_growth_mib": args.max_growth_mib,
            "cpus": os.cpu_count(),
            "load_average": {"start": load_before, "end": os.getloadavg()},
            "results": results,
        }
    )
    out.write_text(json.dumps(runs, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
