"""The key hierarchy: tenant key-encryption keys and per-session, per-class data keys.

::

    tenant key ring (KEK, versioned)          <tenant key dir>/<tenant>/kek.json or env
      └── data key (tenant, session, class)   random 256-bit, stored only wrapped by the KEK
            └── sealed content of that session and class (AES-256-GCM, crypto.py)

Two stores implement the core's ``ContentKeys`` port with the same behaviour (one
contract test suite, tests/integration/test_keystores.py, runs over both):

* :class:`FileKeyStore`: wrapped data keys as files under the state directory (0600,
  created atomically: two processes asking for the same new key get the same one). The
  default of the local stack; its tenant key is created on first use.
* :class:`RedisKeyStore`: wrapped data keys in Redis (``<prefix>:{<tenant>/<session>}:dkeys``),
  for a fleet of nodes; each node gets the tenant key from a file or the environment —
  never from Redis, so a Redis dump alone opens nothing.

Shredding a data key deletes the wrapped key and leaves a tombstone (when, by whom,
why, the tenant key version that wrapped it) so readers can say *deleted* rather than
*missing*, and raises the tenant's *shred mark* to that version. A copy of the wrapped
key taken before (a file, an AOF, an RDB, a backup) still opens with that version, so a
deletion is complete only when :meth:`KeyStore.retire` has destroyed every version up to
the mark (rotate if needed, wait for other processes to see the new version, rewrap the
live keys, drop the old versions): the completion point, docs/operations.md "When a
deletion is complete". Rotating the tenant key rewraps every data key with the new
version; the events in Kafka are not touched. The tenant key rings live apart from the
wrapped data keys (``TenantKeys``: a directory per tenant outside the key dir, or the
environment); every key directory is 0700 and every key file 0600. Legal holds
live in the same store. Unwrapped keys are cached per process until the tenant's shred
feed names them (checked every ``cache_ttl_s``): a shred done elsewhere reaches a
running process within that time (at once in the process that shreds).

One module per concern:

==================  ==============================================================
``ring``            tenant key rings (:class:`TenantKeyRing`, :class:`TenantKeys`)
``port``            :class:`KeyStore`: what every backend shares (the lookup cache and
                    its shred feed, key creation, shredding, holds)
``rotation``        rewrapping under a new tenant key version, retiring old versions
``records``         what the stores report (:class:`Shredded`, :class:`Hold`,
                    :class:`Retirement`)
``fsync``           a batch of new key files made durable with one sync, off the path
``file_store``      :class:`FileKeyStore`
``redis_store``     :class:`RedisKeyStore`
==================  ==============================================================
"""

from sessionstream.governance.keys.file_store import FileKeyStore
from sessionstream.governance.keys.port import KeyStore
from sessionstream.governance.keys.records import Hold, Retirement, Shredded
from sessionstream.governance.keys.redis_store import RedisKeyStore
from sessionstream.governance.keys.ring import KeyConfigError, TenantKeyRing, TenantKeys

__all__ = ["FileKeyStore", "Hold", "KeyConfigError", "KeyStore", "RedisKeyStore", "Retirement",
           "Shredded", "TenantKeyRing", "TenantKeys"]
