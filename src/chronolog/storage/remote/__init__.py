"""Tiered storage (KIP-405): closed segments copied to a tier (a directory or an object store) and still
served from there, by offset and by time. `tier` (the tier's files), `metadata` (a segment's record),
`reading` (tiered segments read through bounded caches), `remote_log` (one partition: copy, expiration,
reads), `manager` (the broker's `RemoteLogManager` and its task)."""
