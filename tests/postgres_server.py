"""A throwaway PostgreSQL server for the tests: ``initdb`` in a temporary
directory, a unix socket in it, no TCP, run as a non-root user.

PostgreSQL refuses to run as root; as root, the server runs as the
``postgres`` user (``runuser -u postgres --``) in a directory given to it.
pytest-postgresql's process fixture starts its server as the current user,
which is root in CI containers, hence this small helper over ``pg_ctl``.

Binaries: ``$TOOLGUARD_PG_BINDIR``, else ``pg_config --bindir``, else the
newest ``/usr/lib/postgresql/*/bin``, else ``initdb`` on ``PATH``.

A server whose test session was killed (no teardown) would run on: each
directory names the process that made it, and a new session stops and
removes those whose maker is dead.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from pytest_toolguard.audit.lease import LeaseOwner, current_owner, owner_is_dead

INSTALL_COMMAND = "apt-get install -y postgresql"
SERVER_USER = "postgres"
PREFIX = "tgpg-"


class ServerUnavailable(Exception):
    """No server can be started here; the message says what to install."""


def find_bindir() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``, or None."""
    candidates: list[str] = []
    if os.environ.get("TOOLGUARD_PG_BINDIR"):
        candidates.append(os.environ["TOOLGUARD_PG_BINDIR"])
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass

    def version(path: str) -> float:
        try:
            return float(Path(path).parent.name)
        except ValueError:
            return 0.0

    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(initdb).parent))
    for candidate in candidates:
        path = Path(candidate)
        if (path / "initdb").is_file() and (path / "pg_ctl").is_file():
            return path
    return None


class PostgresServer:
    """One cluster in ``base`` (data in ``base/data``, the socket in
    ``base``), started and stopped with ``pg_ctl``."""

    def __init__(self, bindir: Path, base: Path | None = None) -> None:
        """A new cluster, or with ``base`` the one already there."""
        self.bindir = bindir
        self._as_user: list[str] = []
        owner: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam(SERVER_USER)
            except KeyError:
                raise ServerUnavailable(
                    f"running as root and there is no {SERVER_USER!r} user to run the "
                    f"server as ({INSTALL_COMMAND} creates it)"
                ) from None
            runuser = shutil.which("runuser")
            if runuser is None:
                raise ServerUnavailable("running as root and there is no runuser")
            self._as_user = [runuser, "-u", SERVER_USER, "--"]
        self.data = (base or Path()) / "data"
        if base is not None:
            self.base = base
            return
        # Short: a unix socket path has a limit of about 100 bytes.
        self.base = Path(tempfile.mkdtemp(prefix=PREFIX, dir="/tmp"))
        (self.base / "maker").write_text(str(current_owner()))
        if owner is not None:
            os.chown(self.base, owner.pw_uid, owner.pw_gid)
        self.data = self.base / "data"
        self.log = self.base / "server.log"
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )

    def _run(self, program: str, *arguments: str, check: bool = True) -> str:
        command = [*self._as_user, str(self.bindir / program), *arguments]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            raise ServerUnavailable(
                f"{program} failed ({done.returncode}): {done.stderr.strip() or done.stdout}"
            )
        return done.stdout

    def start(self) -> None:
        """Start the server (unix socket only; fsync off: a test server)."""
        options = (
            f"-c listen_addresses='' -c unix_socket_directories={self.base}"
            " -c fsync=off -c full_page_writes=off -c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m <mode>``; ``immediate`` is a crash."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def url(self, schema: str | None = None) -> str:
        """A libpq URL of the server's ``postgres`` database; with
        ``schema``, the tables go to that schema (its ``search_path``)."""
        url = f"postgresql://postgres@/postgres?host={quote(str(self.base), safe='/')}"
        if schema is not None:
            url += "&options=" + quote(f"-csearch_path={schema}", safe="")
        return url

    def execute(self, *statements: str) -> None:
        """Run statements as the superuser, each committed."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]

    def new_schema(self) -> str:
        """A URL whose tables live in a new, empty schema: one test's database."""
        schema = f"t_{uuid.uuid4().hex[:16]}"
        self.execute(f"CREATE SCHEMA {schema}")
        return self.url(schema)

    def data_files(self) -> Iterator[tuple[Path, bytes]]:
        """Every file of the data directory, with its bytes."""
        for path in sorted(self.data.rglob("*")):
            if path.is_file() and not path.is_symlink():
                try:
                    yield path, path.read_bytes()
                except OSError:  # a file removed while the server runs
                    continue

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)


def remove_orphans(bindir: Path) -> list[Path]:
    """Stop and remove the servers whose maker (a test session) is dead."""
    here = current_owner()
    removed = []
    for base in sorted(Path("/tmp").glob(f"{PREFIX}*")):
        try:
            maker = LeaseOwner.parse((base / "maker").read_text())
        except OSError:
            continue
        if maker is not None and owner_is_dead(maker, here):
            PostgresServer(bindir, base).remove()
            removed.append(base)
    return removed


def start_server() -> PostgresServer:
    """A running server, or ``ServerUnavailable`` saying what to install."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise ServerUnavailable(
            "psycopg and psycopg_pool are not installed: pip install 'pytest-toolguard[postgres]'"
        ) from None
    bindir = find_bindir()
    if bindir is None:
        raise ServerUnavailable(
            f"no PostgreSQL server binaries (initdb, pg_ctl) found: install them with "
            f"`{INSTALL_COMMAND}`, or set TOOLGUARD_PG_BINDIR"
        )
    remove_orphans(bindir)
    server = PostgresServer(bindir)
    try:
        server.start()
    except BaseException:
        shutil.rmtree(server.base, ignore_errors=True)
        raise
    return server
