"""Run one command as a child process and measure it: wall time, peak RSS, peak GPU memory.

Peak RSS is the kernel's own account, ``ru_maxrss`` of the child as returned by ``os.wait4``
(the child and any descendants it waited for), not a sample: a short spike cannot be missed.

One Linux detail decides how: at ``exec`` the kernel folds the *parent's* memory high-water mark
into the new program's ``ru_maxrss`` (the child starts as a copy, or a ``vfork`` share, of its
parent). A stage started straight from the runner (which has generated 200 MB files and imported
torch, ~1 GB) would report at least the runner's peak. So the command is started by this file run
as a bare script (``python measure.py ...``: standard library only, ~10 MB), which waits for it
and writes the measurement as JSON; that ~10 MB is the floor of every reported peak.

GPU memory is sampled (``nvidia-smi`` every 0.5 s, the child's process id) when ``nvidia-smi``
exists; otherwise it is ``None``. This module must import nothing outside the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Measurement:
    """Outcome of one measured command."""

    returncode: int
    wall_seconds: float
    peak_rss_bytes: int
    gpu_peak_bytes: int | None
    log: Path
    cpu_seconds: float = 0.0  # user + system time of the child (shows CPU contention)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def log_tail(self, chars: int = 3000) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-chars:]


def maxrss_bytes(ru_maxrss: int) -> int:
    """``ru_maxrss`` in bytes (Linux reports kilobytes, macOS bytes)."""
    return int(ru_maxrss) if sys.platform == "darwin" else int(ru_maxrss) * 1024


class GpuPoller(threading.Thread):
    """Samples the GPU memory used by process ``pid`` with ``nvidia-smi`` until stopped."""

    def __init__(self, pid: int, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.peak_bytes = 0
        self._stop_event = threading.Event()

    def sample(self) -> int:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10).stdout
        used = 0
        for line in out.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[0] == str(self.pid) and parts[1].isdigit():
                used += int(parts[1]) * 2**20  # MiB
        return used

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                self.peak_bytes = max(self.peak_bytes, self.sample())
            except (OSError, subprocess.SubprocessError):
                return
            self._stop_event.wait(self.every)

    def stop(self) -> None:
        self._stop_event.set()


def measure_here(argv: list[str], log: Path, timeout: float | None = None) -> dict:
    """Run ``argv`` from this process (stdout and stderr to ``log``) and measure it; a run
    longer than ``timeout`` seconds is killed (its return code is then negative)."""
    with open(log, "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        poller = GpuPoller(proc.pid) if shutil.which("nvidia-smi") else None
        if poller:
            poller.start()
        killer = threading.Timer(timeout, proc.kill) if timeout else None
        if killer:
            killer.start()
        previous = signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            signal.signal(signal.SIGTERM, previous)
            if killer:
                killer.cancel()
            if poller:
                poller.stop()
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait
    return {"returncode": proc.returncode, "wall_seconds": wall,
            "peak_rss_bytes": maxrss_bytes(usage.ru_maxrss),
            "gpu_peak_bytes": poller.peak_bytes if poller else None,
            "cpu_seconds": usage.ru_utime + usage.ru_stime}


#: the launcher in flight (killed, with its stage, if the runner is stopped)
CURRENT: list[subprocess.Popen] = []


def run_measured(argv: list[str], cwd: Path, env: dict[str, str], log: Path,
                 timeout: float | None = None) -> Measurement:
    """Run ``argv`` in ``cwd`` through the bare launcher (see the module doc) and measure it."""
    log.parent.mkdir(parents=True, exist_ok=True)
    result = log.with_name(log.name + ".measure.json")
    result.unlink(missing_ok=True)
    launcher = [sys.executable, "-S", str(Path(__file__).resolve()), "--log", str(log),
                "--result", str(result), *(["--timeout", str(timeout)] if timeout else []),
                "--", *argv]
    proc = subprocess.Popen(launcher, cwd=cwd, env=env, start_new_session=True)
    CURRENT.append(proc)
    try:
        proc.wait()
    finally:
        CURRENT.remove(proc)
    try:
        m = json.loads(result.read_text())
    except (OSError, ValueError):
        return Measurement(proc.returncode or -1, 0.0, 0, None, log)
    return Measurement(m["returncode"], m["wall_seconds"], m["peak_rss_bytes"],
                       m["gpu_peak_bytes"], log, m["cpu_seconds"])


def stop_current() -> None:
    """Terminate the launcher in flight and its stage (their own process group)."""
    for proc in list(CURRENT):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="measure one command (rehearsal launcher)")
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--timeout", type=float)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    measured = measure_here(command, args.log, args.timeout)
    # twirls.files.write_text's steps, written out: this script imports no twirls module
    tmp = args.result.with_name(args.result.name + ".part")
    tmp.write_text(json.dumps(measured))
    tmp.replace(args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
