"""The training scripts, run by the tests without paying their imports every time.

A script started as `python abs_pqn_atari.py ...` spends about 4 s of one core importing torch (and torch._dynamo,
which the first optimizer imports), envpool (which imports matplotlib) and TensorBoard before its first line of work,
and the tests start over a hundred such processes. `run` and `Popen` here take subprocess's arguments and return what
subprocess returns. For a command `sys.executable <one of the five training scripts> ...` they ask a server process,
which imported those libraries once, to fork; the forked process runs the script as `python script.py` does: a real
process with its own pid, pipes, working directory, environment and default signal dispositions, the script run by
runpy as `__main__` with sys.argv and sys.path[0] set, and its exit status the one `python` would give (an uncaught
exception prints its traceback and exits 1). The project's own modules (abs_utils, the script) are never preloaded:
each run imports them afresh. A server serves one environment (thread counts and the like are read at import), one
per pytest worker and environment; any other command goes to subprocess itself.

What a fork cannot show is how long the imports take: a test about the start-up (a signal during the imports) uses
subprocess."""
import atexit
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = {os.path.join(ROOT, s) for s in ("abs_pqn_atari.py", "gns_pqn_atari.py", "abs_ppo_atari.py",
                                           "abs_ppo_mujoco.py", "abs_btr.py")}
# Read by the process itself, not at import: not part of a server's identity.
PER_RUN = {"PYTHONUNBUFFERED", "PYTEST_CURRENT_TEST"}
MESSAGE = 1 << 20


# ================================================================ the server (run as `python preloaded.py <fd>`)
def preload():
    import envpool  # noqa: F401 (and gymnasium)
    import numpy  # noqa: F401
    import torch
    import torch._dynamo  # noqa: F401 (what the first optimizer imports)
    import torch.utils.tensorboard  # noqa: F401
    import tyro  # noqa: F401
    assert len(os.listdir("/proc/self/task")) == 1, "a thread started while importing: forking would not be safe"


def serve(sock):
    """Forks a process per request; returns only in that process, set up to run its script; exits when the tests'
    end of the socket closes."""
    while True:
        readable, _, _ = select.select([sock], [], [], 0.02)
        if readable:
            msg, fds, _, _ = socket.recv_fds(sock, MESSAGE, 3)
            if not msg:  # the tests are gone
                os._exit(0)
            request = json.loads(msg)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                sock.close()
                return become(request, fds)
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"started": pid}).encode())
        while True:  # every process that ended, with its status
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            sock.send(json.dumps({"pid": pid, "status": status}).encode())


def become(request, fds):
    """In the forked process: what `python <script> <args>` would have set up, then the script's path."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))

    def stream(fd, mode, **kw):
        raw = io.FileIO(fd, mode, closefd=False)
        if unbuffered and mode == "w":
            return io.TextIOWrapper(raw, write_through=True, **kw)
        return io.TextIOWrapper(io.BufferedWriter(raw) if mode == "w" else io.BufferedReader(raw), **kw)

    sys._preloaded_streams = (sys.stdin, sys.stdout, sys.stderr)  # kept: never closed, never collected
    sys.stdin = sys.__stdin__ = stream(0, "r", encoding=sys.stdin.encoding)
    sys.stdout = sys.__stdout__ = stream(1, "w", encoding=sys.stdout.encoding, errors=sys.stdout.errors)
    sys.stderr = sys.__stderr__ = stream(2, "w", encoding=sys.stderr.encoding, errors="backslashreplace",
                                         line_buffering=True)
    script = request["argv"][1]
    sys.argv = request["argv"][1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    return script


# ================================================================ the tests' side
class _Server:
    def __init__(self, env):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
        theirs.close()
        self.statuses = {}  # pid -> wait status, of the processes that ended

    def start(self, argv, cwd, env, fds):
        socket.send_fds(self.sock, [json.dumps({"argv": argv, "cwd": cwd, "env": env}).encode()], fds)
        while True:
            reply = self._receive(None)
            if "started" in reply:
                return reply["started"]

    def _receive(self, timeout):
        readable, _, _ = select.select([self.sock], [], [], timeout)
        if not readable:
            return {}
        msg = self.sock.recv(MESSAGE)
        if not msg:
            raise RuntimeError(f"the preloaded server ended (exit {self.proc.poll()})")
        reply = json.loads(msg)
        if "pid" in reply:
            self.statuses[reply["pid"]] = reply["status"]
        return reply

    def status(self, pid, timeout):
        """The wait status of `pid` once it ended; None if it has not ended within `timeout` (None: wait)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while pid not in self.statuses:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._receive(left) and deadline is not None and time.monotonic() >= deadline:
                return None
        return self.statuses.pop(pid)

    def close(self):
        self.sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_SERVERS = {}


def _server(env):
    key = tuple(sorted((k, v) for k, v in env.items() if k not in PER_RUN))
    if key not in _SERVERS or _SERVERS[key].proc.poll() is not None:
        _SERVERS[key] = _Server({k: v for k, v in env.items() if k not in PER_RUN})
    return _SERVERS[key]


@atexit.register
def _close_servers():
    for server in _SERVERS.values():
        server.close()


def _served(args, kwargs):
    return (isinstance(args, (list, tuple)) and len(args) > 1 and args[0] == sys.executable
            and os.path.abspath(str(args[1])) in SCRIPTS
            and set(kwargs) <= {"stdin", "stdout", "stderr", "text", "cwd", "env"}
            and kwargs.get("stdin") in (None, subprocess.DEVNULL))


class _Process:
    """subprocess.Popen's interface for a process the server forked."""

    def __init__(self, args, stdin=None, stdout=None, stderr=None, text=False, cwd=None, env=None):
        self.args = args
        self.returncode = None
        env = dict(os.environ if env is None else env)
        close_here = []

        def output(where):  # -> (our end or None, the fd the process gets)
            if where == subprocess.PIPE:
                r, w = os.pipe()
                close_here.append(w)
                return r, w
            if where == subprocess.DEVNULL:
                fd = os.open(os.devnull, os.O_WRONLY)
                close_here.append(fd)
                return None, fd
            return None, (where.fileno() if hasattr(where, "fileno") else where) if where is not None else None

        out_r, out_w = output(stdout)
        if stderr == subprocess.STDOUT:
            err_r, err_w = None, out_w if out_w is not None else 1
        else:
            err_r, err_w = output(stderr)
        null_in = os.open(os.devnull, os.O_RDONLY) if stdin == subprocess.DEVNULL else None
        fds = [null_in if null_in is not None else 0, 1 if out_w is None else out_w, 2 if err_w is None else err_w]
        try:
            self._server = _server(env)
            self.pid = self._server.start([str(a) for a in args], os.path.abspath(str(cwd or os.getcwd())),
                                          env, fds)
        finally:
            for fd in close_here + ([null_in] if null_in is not None else []):
                os.close(fd)
        mode = "r" if text else "rb"
        self.stdin = None
        self.stdout = open(out_r, mode) if out_r is not None else None
        self.stderr = open(err_r, mode) if err_r is not None else None

    def poll(self):
        return self._wait(0)

    def wait(self, timeout=None):
        if self._wait(timeout) is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def _wait(self, timeout):
        if self.returncode is None:
            status = self._server.status(self.pid, timeout)
            if status is not None:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def communicate(self, input=None, timeout=None):
        assert input is None, "no stdin for a preloaded run"
        results = {}
        readers = [threading.Thread(target=lambda n=n, f=f: results.__setitem__(n, f.read()), daemon=True)
                   for n, f in (("out", self.stdout), ("err", self.stderr)) if f is not None]
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in readers:
            t.start()
        for t in readers:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()
        return results.get("out"), results.get("err")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()
        self.wait()


def Popen(args, **kwargs):
    return _Process(args, **kwargs) if _served(args, kwargs) else subprocess.Popen(args, **kwargs)


def run(args, capture_output=False, timeout=None, check=False, **kwargs):
    """subprocess.run, served for a training script's command."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if not _served(args, kwargs):
        return subprocess.run(args, timeout=timeout, check=check, **kwargs)
    proc = _Process(args, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, args, out, err)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


if __name__ == "__main__":
    import runpy
    server_socket = socket.socket(fileno=int(sys.argv[1]))
    preload()
    script_path = serve(server_socket)  # returns in a forked process only
    del server_socket
    runpy.run_path(script_path, run_name="__main__")
