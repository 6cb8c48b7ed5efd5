"""The training scripts, run by the tests without paying their imports every time.

A script started as `python abs_pqn_atari.py ...` spends about 4 s of one core importing torch (and torch._dynamo,
which the first optimizer imports), envpool (which imports matplotlib) and TensorBoard before its first line of work,
and the tests start over a hundred such processes. `run` and `Popen` here take subprocess's arguments and return what
subprocess returns. For a command `sys.executable <one of SCRIPTS> ...` they ask a server process, which imported
those libraries once, to fork; the forked process runs the script as `python script.py` does: a real process with
its own pid, pipes, working directory, environment and default signal dispositions; sys.argv, sys.path[0], the
standard streams (buffering, encodings, newlines) and the random seeds of NumPy and torch set up as a fresh
interpreter sets them; the script run as the module `__main__` under its absolute path; an uncaught exception's
traceback starting at the script's own frame; and the exit status `python` would give (1 after a traceback, -2 after
an uncaught KeyboardInterrupt). The project's own modules (abs_utils, the script) are never preloaded: each run
imports them afresh. A server serves one environment (thread counts and the like are read at import): one per
pytest worker and environment, at most MAX_SERVERS at a time. Any other command goes to subprocess itself, as does
every command if a server cannot start (its imports started a thread, which would make forking unsafe).

A served run starts with SIGINT and SIGTERM at their defaults, as from an interactive shell; subprocess's child would
inherit an ignored one from the tests' process (exec keeps SIG_IGN; the scripts install their own handlers first).
What a fork cannot give: the start-up's duration (a test about a signal during the imports uses subprocess), a
string hash seed of its own (Python draws it before any code runs: the runs of one server share it), and warnings
the libraries print at import (the server printed them once). One thread of the tests at a time uses a server."""
import atexit
import io
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import time

import scripts  # the scripts (tests/scripts.py, beside this file)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = {os.path.join(ROOT, s) for s in scripts.SCRIPTS}
# Read by the process itself, not at import: not part of a server's identity.
PER_RUN = {"PYTHONUNBUFFERED", "PYTEST_CURRENT_TEST"}
MAX_SERVERS = 3
MESSAGE = 1 << 20


# ================================================================ the server (run as `python preloaded.py <fd>`)
def preload():
    import envpool  # noqa: F401 (and gymnasium)
    try:
        import minatar  # noqa: F401 (and seaborn, about 2 s)
    except ImportError:  # a machine without it: abs_pqn_minatar.py says so in one line itself
        pass
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401 (what the first optimizer imports)
    import torch.utils.tensorboard  # noqa: F401
    import tyro  # noqa: F401
    if not os.path.isdir("/proc/self/task") or len(os.listdir("/proc/self/task")) != 1:
        sys.exit("preloaded: a thread started while importing (or no /proc to tell); forking would not be safe")


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
    """In the forked process: what `python <script> <args>` would have set up; returns the script's absolute path."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    # The standard streams as CPython's create_stdio makes them: buffer sizes from the file, "\n" newlines, stderr
    # line-buffered, everything unbuffered (write-through) under PYTHONUNBUFFERED.
    buffered = not request["env"].get("PYTHONUNBUFFERED")

    def stream(fd, old, name):
        writing = fd != 0
        raw_or_buffer = io.open(fd, "wb" if writing else "rb", buffering=-1 if buffered or not writing else 0,
                                closefd=False)
        (raw_or_buffer.raw if hasattr(raw_or_buffer, "raw") else raw_or_buffer).name = name
        line = buffered and writing and (os.isatty(fd) or fd == 2)
        return io.TextIOWrapper(raw_or_buffer, encoding=old.encoding, errors=old.errors, newline="\n",
                                line_buffering=line, write_through=not buffered)

    sys._preloaded_streams = (sys.stdin, sys.stdout, sys.stderr)  # kept: never closed, never collected
    sys.stdin = sys.__stdin__ = stream(0, sys.stdin, "<stdin>")
    sys.stdout = sys.__stdout__ = stream(1, sys.stdout, "<stdout>")
    sys.stderr = sys.__stderr__ = stream(2, sys.stderr, "<stderr>")

    import numpy as np
    import torch
    np.random.seed()  # a fresh interpreter's global generators start from fresh entropy; Python's random module
    torch.seed()  # is reseeded at fork by itself

    script = os.path.join(request["cwd"], request["argv"][1])
    sys.argv = request["argv"][1:]
    sys.path[0] = os.path.dirname(script)

    def excepthook(kind, value, tb):  # the traceback from the script's own frame, as `python script.py` prints it
        first = tb
        while first is not None and first.tb_frame.f_code.co_filename != script:
            first = first.tb_next
        sys.__excepthook__(kind, value.with_traceback(first or tb), first or tb)  # (printed from value's)

    sys.excepthook = excepthook
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
        try:
            socket.send_fds(self.sock, [json.dumps({"argv": argv, "cwd": cwd, "env": env}).encode()], fds)
        except OSError:
            self._gone()
        while True:
            reply = self._receive(None)
            if "started" in reply:
                return reply["started"]

    def _gone(self):
        raise ServerGone(f"the preloaded server ended (exit {self.proc.wait()})")

    def _receive(self, timeout):
        readable, _, _ = select.select([self.sock], [], [], timeout)
        if not readable:
            return {}
        try:
            msg = self.sock.recv(MESSAGE)
        except OSError:
            msg = b""
        if not msg:
            self._gone()
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


class ServerGone(RuntimeError):
    pass


_SERVERS = {}  # environment -> server, the most recently used last
_UNAVAILABLE = set()  # environments whose server could not start


def _key(env):
    return tuple(sorted((k, v) for k, v in env.items() if k not in PER_RUN))


def _server(key):
    server = _SERVERS.pop(key, None)
    if server is None or server.proc.poll() is not None:
        server = _Server(dict(key))
        while len(_SERVERS) >= MAX_SERVERS:
            _SERVERS.pop(next(iter(_SERVERS))).close()
    _SERVERS[key] = server
    return server


@atexit.register
def _close_servers():
    for server in _SERVERS.values():
        server.close()


def _script(args, kwargs):
    """The script's absolute path if the command is one to serve, else None."""
    if not (isinstance(args, (list, tuple)) and len(args) > 1 and args[0] == sys.executable):
        return None
    if not set(kwargs) <= {"stdin", "stdout", "stderr", "text", "cwd", "env"} or kwargs.get("stdin") not in (
            None, subprocess.DEVNULL):
        return None
    script = os.path.normpath(os.path.join(os.path.abspath(str(kwargs.get("cwd") or os.getcwd())), str(args[1])))
    env = os.environ if kwargs.get("env") is None else kwargs["env"]
    return script if script in SCRIPTS and _key(env) not in _UNAVAILABLE else None


class _Process:
    """The part of subprocess.Popen's interface the tests use (pid, stdout, stderr, returncode, poll, wait,
    send_signal, kill, communicate), for a process the server forked."""

    def __init__(self, args, stdin=None, stdout=None, stderr=None, text=False, cwd=None, env=None):
        self.args = args
        self.returncode = None
        self.text = text
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
            if where is None:
                return None, None
            return None, where.fileno() if hasattr(where, "fileno") else where

        out_r, out_w = output(stdout)
        if stderr == subprocess.STDOUT:
            err_r, err_w = None, out_w if out_w is not None else 1
        else:
            err_r, err_w = output(stderr)
        null_in = os.open(os.devnull, os.O_RDONLY) if stdin == subprocess.DEVNULL else None
        fds = [0 if null_in is None else null_in, 1 if out_w is None else out_w, 2 if err_w is None else err_w]
        try:
            self._server = _server(_key(env))
            self.pid = self._server.start([str(a) for a in args], os.path.abspath(str(cwd or os.getcwd())), env,
                                          fds)
        except BaseException:
            for fd in (out_r, err_r):
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in close_here + ([null_in] if null_in is not None else []):
                os.close(fd)
        mode = "r" if text else "rb"
        self.stdin = None
        self.stdout = open(out_r, mode) if out_r is not None else None
        self.stderr = open(err_r, mode) if err_r is not None else None
        self._output = None  # file -> bytes read by communicate, as subprocess keeps them across calls

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
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # it ended and was reaped before its status arrived; subprocess ignores it too
                pass

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def communicate(self, input=None, timeout=None):
        """As subprocess's on POSIX: reads the pipes with os.read until they close (what a file object had already
        buffered is not seen again), keeps what it read across a timeout, then waits."""
        assert input is None, "no stdin for a preloaded run"
        if self._output is None:
            self._output = {f: [] for f in (self.stdout, self.stderr) if f is not None and not f.closed}
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            for f in self._output:
                if not f.closed:
                    selector.register(f, selectors.EVENT_READ)
            while selector.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout, *self._read(raw=True))
                for key, _ in selector.select(left):
                    data = os.read(key.fd, 32768)
                    if data:
                        self._output[key.fileobj].append(data)
                    else:
                        selector.unregister(key.fileobj)
                        key.fileobj.close()
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self._read()

    def _read(self, raw=False):
        def text(f):
            if f not in self._output:
                return None
            data = b"".join(self._output[f])
            if raw or not self.text:
                return data
            return data.decode(f.encoding, f.errors).replace("\r\n", "\n").replace("\r", "\n")
        return text(self.stdout), text(self.stderr)


def Popen(args, **kwargs):
    if _script(args, kwargs):
        try:
            return _Process(args, **kwargs)
        except ServerGone:
            _UNAVAILABLE.add(_key(os.environ if kwargs.get("env") is None else kwargs["env"]))
    return subprocess.Popen(args, **kwargs)


def run(args, capture_output=False, timeout=None, check=False, **kwargs):
    """subprocess.run, served for a training script's command."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc = Popen(args, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as e:
        proc.kill()
        e.stdout, e.stderr = proc.communicate()
        raise
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, args, out, err)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


if __name__ == "__main__":
    server_socket = socket.socket(fileno=int(sys.argv[1]))
    preload()
    script_path = serve(server_socket)  # returns in a forked process only
    del server_socket
    # The script as the module __main__, with the globals `python script.py` gives it (not runpy.run_path, which
    # would set sys.argv[0] to the absolute path).
    import builtins
    import types
    from importlib.machinery import SourceFileLoader
    main = types.ModuleType("__main__")
    main.__dict__.update(__package__=None, __loader__=SourceFileLoader("__main__", script_path), __spec__=None,
                         __annotations__={}, __builtins__=builtins, __file__=script_path, __cached__=None)
    sys.modules["__main__"] = main
    with open(script_path, "rb") as source:
        code = compile(source.read(), script_path, "exec")
    exec(code, main.__dict__)
