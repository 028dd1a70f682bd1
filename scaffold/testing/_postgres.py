"""A throwaway PostgreSQL cluster for tests and benchmarks.

:class:`PostgresServer` runs the local PostgreSQL server binaries (``initdb``, ``pg_ctl``,
``postgres``) to make a fresh cluster in a temporary directory, serves it on a free TCP port of
127.0.0.1 with ``trust`` authentication for the superuser ``scaffold``, and creates the database
``scaffold``. :meth:`PostgresServer.stop` kills it (``pg_ctl stop -m immediate``) and deletes the
directory; it is also registered with :mod:`atexit`, so a test session that dies leaves no server
behind (short of ``SIGKILL``).

The binaries are looked for on ``PATH`` first, then in ``/usr/lib/postgresql/<version>/bin``
(highest version first), which is where Debian and Ubuntu's ``postgresql`` package puts them.
By default the cluster trades durability for speed (``fsync``, ``synchronous_commit`` and
``full_page_writes`` off); ``durable=True`` keeps PostgreSQL's defaults.

PostgreSQL refuses to run as root. Under root the cluster is made and run as the ``postgres``
system user (created by Debian's package) through ``runuser`` (or ``su``); its directory is
handed to that user. Standard library only: the database is created with the ``createdb`` found
next to ``initdb``, or with :mod:`psycopg` when that binary is missing.

Examples:
    >>> with PostgresServer() as server:  # doctest: +SKIP
    ...     engine = sqlalchemy.create_engine(server.url)
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import re
import shlex
import shutil
import socket
import stat
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from scaffold._errors import StoreError

__all__ = ["PostgresServer", "find_server_binaries"]

_INSTALL_HINT = (
    "install PostgreSQL's server (Debian/Ubuntu: `apt-get install postgresql`, or run .ci/postgres.sh)"
)
_SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")
_FAST_SETTINGS = ("-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off")
_SOCKET_PATH_LIMIT = 90  # sockaddr_un holds 107 bytes; PostgreSQL appends "/.s.PGSQL.<port>" (and a ".lock")
_START_ATTEMPTS = 3  # a free port can be taken by someone else before the server binds it
_USER = "scaffold"
_DATABASE = "scaffold"


def find_server_binaries() -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``: ``PATH`` first, then the highest
    ``/usr/lib/postgresql/<version>/bin``. Raises :class:`~scaffold._errors.StoreError` saying how to install."""
    candidates: list[Path] = []
    on_path = shutil.which("initdb")
    if on_path is not None:
        candidates += [Path(on_path).resolve().parent, Path(on_path).parent]

    def version(directory: str) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", Path(directory).parent.name))

    candidates += [Path(d) for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)]
    for directory in candidates:
        if all(os.access(directory / name, os.X_OK) for name in _SERVER_BINARIES):
            return directory
    raise StoreError(f"PostgreSQL server binaries ({', '.join(_SERVER_BINARIES)}) not found on PATH "
                     f"or in /usr/lib/postgresql/*/bin; {_INSTALL_HINT}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no server log)"
    return "\n".join(text.splitlines()[-lines:]) or "(server log is empty)"


class PostgresServer:
    """A fresh PostgreSQL cluster on 127.0.0.1, deleted on :meth:`stop`.

    ``base_dir`` is where the cluster's temporary directory is made (default: the system's temp
    directory); the directory itself (``data/``, ``log``, ``sock/``) is always new and always
    removed. ``durable=False`` (the default) turns off ``fsync``, ``synchronous_commit`` and
    ``full_page_writes``: fast, and fine for data that dies with the server.

    :attr:`url` is a SQLAlchemy URL for the ``psycopg`` driver
    (``postgresql+psycopg://scaffold@127.0.0.1:<port>/scaffold``); no password is needed.

    Examples:
        >>> with PostgresServer() as server:  # doctest: +SKIP
        ...     print(server.url)
        postgresql+psycopg://scaffold@127.0.0.1:41873/scaffold
    """

    def __init__(self, base_dir: str | os.PathLike[str] | None = None, *, durable: bool = False) -> None:
        self.base_dir = None if base_dir is None else Path(base_dir)
        self.durable = durable
        self.directory: Path | None = None
        self._port: int | None = None
        self._bin: Path | None = None
        self._run_as: pwd.struct_passwd | None = None
        self._socket_dir: Path | None = None

    # -- public surface -------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The TCP port the server listens on (127.0.0.1 only)."""
        if self._port is None:
            raise StoreError("PostgresServer is not running; call start() first")
        return self._port

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the ``scaffold`` database: ``postgresql+psycopg://scaffold@127.0.0.1:<port>/scaffold``."""
        return f"postgresql+psycopg://{_USER}@127.0.0.1:{self.port}/{_DATABASE}"

    @property
    def running(self) -> bool:
        """Whether :meth:`start` succeeded and :meth:`stop` has not run since."""
        return self._port is not None

    def start(self) -> PostgresServer:
        """Make the cluster, start the server, create the ``scaffold`` database; returns ``self``."""
        if self.running:
            return self
        self._bin = find_server_binaries()
        self._run_as = self._server_user()
        self.directory = Path(tempfile.mkdtemp(prefix="scaffold-pg-", dir=self.base_dir))
        atexit.register(self.stop)
        try:
            self._prepare_directory()
            self._initdb()
            self._start_server()
            self._create_database()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server at once (``pg_ctl stop -m immediate``) and delete its directory. Safe to call twice."""
        atexit.unregister(self.stop)
        directory, self.directory = self.directory, None
        if directory is None:
            return
        if self._bin is not None and (directory / "data" / "postmaster.pid").exists():  # also after a failed start
            self._run_server_tool([str(self._bin / "pg_ctl"), "stop", "-D", str(directory / "data"),
                                   "-m", "immediate", "-w", "-t", "30"], directory=directory, check=False)
        self._port = None
        shutil.rmtree(directory, ignore_errors=True)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"url={self.url!r}" if self.running else "stopped"
        return f"PostgresServer({state})"

    # -- steps ----------------------------------------------------------------------------------

    @staticmethod
    def _server_user() -> pwd.struct_passwd | None:
        """``None`` when running as a normal user; the ``postgres`` account when running as root."""
        if os.geteuid() != 0:
            return None
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            raise StoreError("PostgreSQL refuses to run as root and there is no 'postgres' system user to run it as; "
                             f"run the tests as a normal user, or {_INSTALL_HINT} (it creates that user)") from None
        if shutil.which("runuser") is None and shutil.which("su") is None:
            raise StoreError("running as root: need `runuser` or `su` to start PostgreSQL as the 'postgres' user")
        return account

    def _prepare_directory(self) -> None:
        assert self.directory is not None
        socket_dir = self.directory / "sock"
        if len(str(socket_dir)) > _SOCKET_PATH_LIMIT:  # a long base_dir: keep the Unix socket somewhere short
            self._socket_dir = socket_dir = Path(tempfile.mkdtemp(prefix="scaffold-pg-sock-"))
        else:
            socket_dir.mkdir()
        account = self._run_as
        if account is None:
            return
        for path in (self.directory, socket_dir):
            os.chmod(path, 0o700)
            os.chown(path, account.pw_uid, account.pw_gid)
        self._check_reachable(self.directory, account)
        self._check_reachable(socket_dir, account)

    @staticmethod
    def _check_reachable(path: Path, account: pwd.struct_passwd) -> None:
        """Every directory above ``path`` must let the ``postgres`` user through (``x``)."""
        groups = set(os.getgrouplist(account.pw_name, account.pw_gid))
        for parent in path.resolve().parents:
            info = parent.stat()
            if info.st_uid == account.pw_uid:
                allowed = bool(info.st_mode & stat.S_IXUSR)
            elif info.st_gid in groups:
                allowed = bool(info.st_mode & stat.S_IXGRP)
            else:
                allowed = bool(info.st_mode & stat.S_IXOTH)
            if not allowed:
                raise StoreError(f"running as root, PostgreSQL runs as user 'postgres', which cannot enter {parent} "
                                 f"(mode {stat.filemode(info.st_mode)}); pass a base_dir it can reach, "
                                 f"or `chmod o+x {parent}`")

    def _initdb(self) -> None:
        assert self._bin is not None and self.directory is not None
        self._run_server_tool([str(self._bin / "initdb"), "-D", str(self.directory / "data"), "-U", _USER,
                               "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"])

    def _start_server(self) -> None:
        assert self._bin is not None and self.directory is not None
        socket_dir = self._socket_dir or self.directory / "sock"
        log = self.directory / "log"
        for attempt in range(1, _START_ATTEMPTS + 1):
            port = _free_port()
            options = [f"-p {port}", f"-k {shlex.quote(str(socket_dir))}", "-c listen_addresses=127.0.0.1"]
            if not self.durable:
                options += _FAST_SETTINGS
            result = self._run_server_tool(
                [str(self._bin / "pg_ctl"), "start", "-D", str(self.directory / "data"), "-l", str(log),
                 "-w", "-t", "60", "-o", " ".join(options)],
                check=False,
            )
            if result.returncode == 0:
                self._port = port
                return
            log_tail = _tail(log)
            if attempt < _START_ATTEMPTS and "could not bind" in log_tail:
                log.unlink(missing_ok=True)
                continue
            raise StoreError(f"PostgreSQL did not start (pg_ctl exit {result.returncode}): "
                             f"{result.stdout.strip()}\n--- server log ({log}) ---\n{log_tail}")

    def _create_database(self) -> None:
        assert self._bin is not None and self.directory is not None
        createdb = self._bin / "createdb"
        if os.access(createdb, os.X_OK):
            result = subprocess.run(
                [str(createdb), "-h", "127.0.0.1", "-p", str(self.port), "-U", _USER, _DATABASE],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
                cwd=self.directory, check=False,
            )
            if result.returncode != 0:
                raise StoreError(f"createdb {_DATABASE} failed: {result.stdout.strip()}\n"
                                 f"--- server log ---\n{_tail(self.directory / 'log')}")
            return
        try:
            import psycopg
        except ImportError:
            raise StoreError(f"cannot create database {_DATABASE!r}: no `createdb` in {self._bin} and psycopg is "
                             "not installed (pip install 'scaffold-sdk[postgres]')") from None
        conninfo = f"host=127.0.0.1 port={self.port} user={_USER} dbname=postgres"
        with psycopg.connect(conninfo, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{_DATABASE}"')

    # -- running commands -----------------------------------------------------------------------

    def _run_server_tool(
        self, command: list[str], *, directory: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run ``initdb``/``pg_ctl``, as the ``postgres`` user under root; output captured for error messages."""
        cwd = directory or self.directory
        if self._run_as is not None:
            runuser = shutil.which("runuser")
            if runuser is not None:
                command = [runuser, "-u", self._run_as.pw_name, "--", *command]
            else:
                command = ["su", self._run_as.pw_name, "-s", "/bin/sh", "-c", shlex.join(command)]
        env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL, cwd=cwd, env=env, check=False)
        if check and result.returncode != 0:
            raise StoreError(f"{shlex.join(command)} failed (exit {result.returncode}):\n{result.stdout.strip()}")
        return result
