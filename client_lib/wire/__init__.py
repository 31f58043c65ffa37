"""What travels between client and server (docs/protocol.md): values encoded with their
content digests (:mod:`.codec`, :mod:`.frames`) and the signed body digest
(:mod:`.body_hash`). Imports only ``core`` and ``hashing``."""
