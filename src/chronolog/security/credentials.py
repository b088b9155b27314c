"""The SCRAM credentials of a broker: `chronolog-credentials.json` in the data dir, holding per user and
mechanism only the salt, iteration count, StoredKey and ServerKey (what Kafka keeps in its metadata log
for `kafka-configs --alter --add-config SCRAM-SHA-256=[...]`), never a password.

    {"version": 1, "users": {"alice": {"SCRAM-SHA-256": {"salt": "...", "iterations": 4096,
                                                        "stored_key": "...", "server_key": "..."}}}}
"""

from __future__ import annotations

import re
from pathlib import Path

from chronolog.errors import ChronologError
from chronolog.security import scram
from chronolog.security.files import WatchedJson, locked, write_json_atomic

CREDENTIALS_FILE = "chronolog-credentials.json"
_USER_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,255}$")


def validate_user_name(name: str) -> str:
    if not _USER_NAME.match(name or "") or name != name.strip():
        raise ChronologError(f"invalid user name {name!r}: 1-255 characters, no control characters, "
                             "no leading or trailing spaces")
    return name


class CredentialStore:
    def __init__(self, data_dir: Path | str) -> None:
        self.path = Path(data_dir) / CREDENTIALS_FILE
        self._file = WatchedJson(self.path, {"version": 1, "users": {}})

    def _users(self) -> dict:
        data = self._file.get()
        users = data.get("users") if isinstance(data, dict) else None
        if not isinstance(users, dict):
            raise ChronologError(f"{self.path}: no 'users' object")
        return users

    def lookup(self, user: str, mechanism: str) -> scram.ScramCredential | None:
        """The credential a SCRAM exchange checks (None: no such user or mechanism)."""
        entry = self._users().get(user, {}).get(mechanism)
        if entry is None:
            return None
        try:
            return scram.ScramCredential.from_json(entry)
        except (KeyError, TypeError, ValueError):
            return None

    def verify_plain(self, user: str, password: str) -> bool:
        """SASL/PLAIN: hash the offered password with a stored SCRAM credential's salt and iterations and
        compare StoredKeys (any mechanism the user has; SHA-256 first)."""
        for mechanism in scram.MECHANISMS:
            credential = self.lookup(user, mechanism)
            if credential is not None:
                return scram.verify_password(mechanism, credential, password)
        # Same cost for an unknown user, so timing does not tell which names exist.
        scram.salted_password("SCRAM-SHA-256", password, b"chronolog-no-such-user", scram.DEFAULT_ITERATIONS)
        return False

    def users(self) -> dict[str, dict[str, int]]:
        """user -> {mechanism: iterations}."""
        return {user: {mech: int(c.get("iterations", 0)) for mech, c in mechs.items()}
                for user, mechs in sorted(self._users().items())}

    def upsert(self, user: str, mechanism: str, password: str,
               iterations: int = scram.DEFAULT_ITERATIONS) -> None:
        validate_user_name(user)
        if not password:
            raise ChronologError("the password must not be empty")
        credential = scram.make_credential(mechanism, password, iterations=iterations)
        with locked(self.path):
            users = dict(self._users())
            users[user] = {**users.get(user, {}), mechanism: credential.to_json()}
            write_json_atomic(self.path, {"version": 1, "users": users})

    def put(self, user: str, mechanism: str, credential: scram.ScramCredential) -> None:
        """Store a credential made elsewhere (AlterUserScramCredentials)."""
        validate_user_name(user)
        with locked(self.path):
            users = dict(self._users())
            users[user] = {**users.get(user, {}), mechanism: credential.to_json()}
            write_json_atomic(self.path, {"version": 1, "users": users})

    def delete(self, user: str, mechanism: str | None = None) -> bool:
        """Remove one mechanism or the whole user; False when there was nothing to remove."""
        with locked(self.path):
            users = dict(self._users())
            if user not in users:
                return False
            if mechanism is None:
                del users[user]
            else:
                mechs = dict(users[user])
                if mechs.pop(mechanism, None) is None:
                    return False
                if mechs:
                    users[user] = mechs
                else:
                    del users[user]
            write_json_atomic(self.path, {"version": 1, "users": users})
            return True
