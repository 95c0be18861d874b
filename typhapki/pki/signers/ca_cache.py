"""A remote signer's current CA and profile expiry, cached on disk per signer URL,
label and profile.

`check` runs on every node every Puppet run. Asking cfssl's `info` API each time would
cost the PKI one request per node per run; the cache costs it one per node per TTL
(default one hour, bench/bench_ca_cache.py). Each entry is fresh for the TTL less up to
a fifth of it, from a hash of the node's name, so a fleet's entries do not all expire
in the same minute; after a failed refresh a node waits its own share of a quarter
TTL before asking again, so nodes do not all ask at once when cfssl comes back.

    STATE_DIR/signer-ca/<sha256(url, label, profile)>.json
    {"version": 2, "url": ..., "label": ..., "profile": ..., "ca_pem": "...",
     "expiry": SECONDS or null, "fetched_at": UNIX, "fresh_until": UNIX,
     "retry_after": UNIX}

`expiry` is the profile's, as cfssl's `info` reports it (cfssl 1.2 signs for that
long whatever is asked: the leaf lifetime in cfssl mode, typhapki/pki/plan.py).
`facts` and `metrics` read these entries (`lookup`) and never ask the signer; only
`check` and `issue` refresh them.

An entry that does not parse, names another signer, or whose times are impossible
(in the future, out of order) is ignored: the CA is asked for again.

Next to the entries, one record per signer URL and label says what the signer last
answered this node, whatever the cache holds (issue 39: a front that refuses a node
must show in `facts`, `metrics` and `check --nagios`, cache or no cache):

    STATE_DIR/signer-ca/<sha256("answer", url, label)>.answer
    {"version": 1, "url": ..., "label": ..., "confirmed_at": UNIX or null,
     "refused_at": UNIX or null, "reason": "one line" or null, "refused": BOOL}

`check` and `issue` write it (`record_answer`) each time the signer answers: a CA
or a certificate confirms the node; a refusal (the front's TLS alert, HTTP 401/403,
cfssl's own "no") records when and why. A signer that is down refuses nothing and
changes nothing here. A record that does not parse, names another signer, holds an
impossible time or a reason that is not one short printable line is not trusted:
it reads as no record at all.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import timedelta
from pathlib import Path

from cryptography import x509

from typhapki.errors import ConfigError, TyphapkiError
from typhapki.pki.pem import parse_certs
from typhapki.pki.settings import renewal_spread
from typhapki.record import record

VERSION = 2
SUBDIR = "signer-ca"
MAX_BYTES = 64 * 1024
FRESH_JITTER = 0.2  # share of the TTL a node's entry may expire early
RETRY_SHARE = 0.25  # share of the TTL across which nodes retry after a failure
MAX_EXPIRY = 36500 * 86400  # 100 years, as for any duration (pki/settings.py)
CLOCK_SLACK = 300  # seconds a timestamp may lie ahead (clock steps) before it is corrupt
ANSWER_VERSION = 1
ANSWER_SUFFIX = ".answer"  # not *.json: the entries alone are the CA cache
MAX_REASON = 300  # characters of a refusal's reason kept: one line in a fact or a status


@record(frozen=True)
class CachedCa:
    """One cache entry: the CA, when it was fetched, until when it is fresh."""

    cert: x509.Certificate
    fetched_at: int
    fresh_until: int
    retry_after: int
    expiry: int | None = None  # seconds: the profile's leaf lifetime, when cfssl said


def cache_path(state_dir: Path, url: str, label: str, profile: str = "") -> Path:
    digest = hashlib.sha256(f"{url}\0{label}\0{profile}".encode()).hexdigest()[:32]
    return state_dir / SUBDIR / f"{digest}.json"


def fresh_for(ttl: timedelta, node_name: str, url: str) -> int:
    """Seconds an entry stays fresh on this node: the TTL less the node's jitter."""
    share = renewal_spread(f"{node_name}\0{url}")
    return max(1, math.floor(ttl.total_seconds() * (1 - FRESH_JITTER * share)))


def retry_pause(ttl: timedelta, node_name: str, url: str, attempt_at: int) -> int:
    """When this node may ask again after a failed refresh."""
    share = renewal_spread(f"retry\0{node_name}\0{url}\0{attempt_at // 60}")
    return attempt_at + max(1, math.floor(ttl.total_seconds() * RETRY_SHARE * share))


def read(path: Path, url: str, label: str, now: float, profile: str = "") -> CachedCa | None:
    """The entry, or None when there is none or it cannot be trusted to be one."""
    from typhapki.safeio import read_regular

    try:  # never blocks on a FIFO, never follows a size past the limit
        raw = read_regular(path, "signer CA cache", MAX_BYTES)
    except (ConfigError, OSError):
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        return None
    if doc.get("url") != url or doc.get("label") != label or doc.get("profile") != profile:
        return None
    expiry = doc.get("expiry")
    if expiry is not None and (
        not isinstance(expiry, int) or isinstance(expiry, bool) or not 0 < expiry <= MAX_EXPIRY
    ):
        return None
    times = [doc.get(k) for k in ("fetched_at", "fresh_until", "retry_after")]
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in times):
        return None
    fetched_at, fresh_until, retry_after = times
    assert isinstance(fetched_at, int) and isinstance(fresh_until, int)
    assert isinstance(retry_after, int)
    if fetched_at > now + CLOCK_SLACK or fresh_until < fetched_at or retry_after < fetched_at:
        return None
    if fresh_until > now + CLOCK_SLACK + 366 * 86400 or retry_after > now + 366 * 86400:
        return None
    pem = doc.get("ca_pem")
    if not isinstance(pem, str):
        return None
    try:
        certs = parse_certs(pem.encode("ascii"), str(path))
    except (ConfigError, UnicodeEncodeError):
        return None
    if len(certs) != 1:
        return None
    return CachedCa(certs[0], fetched_at, fresh_until, retry_after, expiry)


def write(path: Path, url: str, label: str, entry: CachedCa, profile: str = "") -> None:
    """Record the entry atomically; a cache that cannot be written is no error."""
    from cryptography.hazmat.primitives.serialization import Encoding

    doc = {
        "version": VERSION,
        "url": url,
        "label": label,
        "profile": profile,
        "ca_pem": entry.cert.public_bytes(Encoding.PEM).decode("ascii"),
        "expiry": entry.expiry,
        "fetched_at": entry.fetched_at,
        "fresh_until": entry.fresh_until,
        "retry_after": entry.retry_after,
    }
    _write_best_effort(path, doc)


@record(frozen=True)
class SignerAnswer:
    """What the signer last said to this node: when it last confirmed it (a CA or a
    certificate came back), when it last refused it, and why (one printable line)."""

    confirmed_at: int | None = None
    refused_at: int | None = None
    reason: str | None = None
    # Whether the signer's last word was a refusal: kept as such, since a refusal and
    # a confirmation can fall into the same second (one profile's CA, then a sign).
    refused: bool = False


def answer_path(state_dir: Path, url: str, label: str) -> Path:
    digest = hashlib.sha256(f"answer\0{url}\0{label}".encode()).hexdigest()[:32]
    return state_dir / SUBDIR / f"{digest}{ANSWER_SUFFIX}"


def one_line(reason: str) -> str:
    """A refusal's reason as the record keeps it: printable, one line, bounded. The
    signer's own words in it were escaped already (cfssl.server_text): what is not
    printable is escaped here, and nothing twice."""
    text = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in reason[:MAX_REASON])
    if len(reason) > MAX_REASON or len(text) > MAX_REASON:
        return text[: MAX_REASON - 3] + "..."
    return text


def _trusted_time(value: object, now: float) -> bool:
    if value is None:
        return True
    return (
        isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= now + CLOCK_SLACK
    )


def read_answer(path: Path, url: str, label: str, now: float) -> SignerAnswer | None:
    """The signer's last answer to this node, or None: no record, or none to trust."""
    from typhapki.safeio import read_regular

    try:
        raw = read_regular(path, "signer answer record", MAX_BYTES)
        doc = json.loads(raw)
    except (ConfigError, OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("version") != ANSWER_VERSION:
        return None
    if doc.get("url") != url or doc.get("label") != label:
        return None
    confirmed, refused, reason = (doc.get(k) for k in ("confirmed_at", "refused_at", "reason"))
    if not (_trusted_time(confirmed, now) and _trusted_time(refused, now)):
        return None
    if (refused is None) != (reason is None):
        return None  # a refusal always says why; no reason without one
    last_refused = doc.get("refused")
    if not isinstance(last_refused, bool) or (last_refused and refused is None):
        return None
    if not last_refused and confirmed is None:
        return None  # neither word: not as record_answer writes it
    if reason is not None and not (
        isinstance(reason, str) and 0 < len(reason) <= MAX_REASON and reason.isprintable()
    ):
        return None  # not as record_answer writes it: control characters, or too long
    assert confirmed is None or isinstance(confirmed, int)
    assert refused is None or isinstance(refused, int)
    return SignerAnswer(confirmed, refused, reason, last_refused)


def record_answer(path: Path, url: str, label: str, now: int, refusal: str | None = None) -> None:
    """Record that the signer confirmed this node at `now`, or refused it (`refusal`:
    why). Atomic; the other half of the last record is kept. A record that cannot be
    written is no error: it never stops `check` or `issue`."""
    last = read_answer(path, url, label, now) or SignerAnswer()
    if refusal is None:
        answer = SignerAnswer(now, last.refused_at, last.reason, refused=False)
    else:
        answer = SignerAnswer(last.confirmed_at, now, one_line(refusal), refused=True)
    doc = {
        "version": ANSWER_VERSION,
        "url": url,
        "label": label,
        "confirmed_at": answer.confirmed_at,
        "refused_at": answer.refused_at,
        "reason": answer.reason,
        "refused": answer.refused,
    }
    _write_best_effort(path, doc)


def _write_best_effort(path: Path, doc: dict[str, object]) -> None:
    """Write a cache record atomically, or not at all: the next run asks cfssl again,
    and `check` must never fail on a cache it could not write."""
    from typhapki.pki.store import write_file_atomic

    try:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        write_file_atomic(path, json.dumps(doc, indent=1).encode(), 0o644, durable=False)
    except (OSError, TyphapkiError):
        pass
