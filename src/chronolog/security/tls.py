"""Server TLS contexts from Kafka's `ssl.*` configs (PEM keystores only, KIP-651) and the principal of
a client certificate.

Principal mapping is a simplified `ssl.principal.mapping.rules`: `DEFAULT` gives `User:<subject CN>`
(Kafka's DEFAULT is the whole distinguished name, `User:CN=alice,OU=...`; the CN is what people grant ACLs
to, so it is our default), and `RULE:pattern/replacement/[LU]` rules are applied to the RFC 2253
distinguished name as Kafka's `SslPrincipalMapper` does, first match wins, `DEFAULT` ending the list."""

from __future__ import annotations

import contextlib
import os
import re
import ssl
from dataclasses import dataclass
from typing import Any

from chronolog.errors import ChronologError

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def _secret(value: Any) -> str:
    """Config values of Kafka's PASSWORD type arrive wrapped so that they never print."""
    return "" if value is None else str(getattr(value, "value", value))


def server_context(config: Any) -> ssl.SSLContext:
    """An SSLContext for a TLS listener; `config` maps Kafka's names to values (a BrokerConfig)."""
    if str(config["ssl.keystore.type"]).upper() != "PEM":
        raise ChronologError("ssl.keystore.type: only PEM is supported")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    protocols = [p.strip() for p in str(config["ssl.enabled.protocols"]).split(",") if p.strip()]
    try:
        versions = sorted(_PROTOCOLS[p] for p in protocols)
    except KeyError as exc:
        raise ChronologError(f"ssl.enabled.protocols: unsupported protocol {exc.args[0]} "
                             f"(supported: {', '.join(_PROTOCOLS)})") from None
    if not versions:
        raise ChronologError("ssl.enabled.protocols must name at least one protocol")
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    password = _secret(config["ssl.key.password"]) or None
    location = str(config["ssl.keystore.location"])
    chain, key = _secret(config["ssl.keystore.certificate.chain"]), _secret(config["ssl.keystore.key"])
    try:
        if location:
            ctx.load_cert_chain(location, password=password)
        elif chain and key:
            _load_inline(ctx, chain, key, password)
        else:
            raise ChronologError("a TLS listener needs ssl.keystore.location (PEM: certificate chain and "
                                 "private key) or ssl.keystore.certificate.chain with ssl.keystore.key")
        trust = str(config["ssl.truststore.location"])
        trust_inline = _secret(config["ssl.truststore.certificates"])
        if trust:
            ctx.load_verify_locations(cafile=trust)
        elif trust_inline:
            ctx.load_verify_locations(cadata=trust_inline)
    except (OSError, ssl.SSLError) as exc:
        raise ChronologError(f"cannot load the TLS keystore/truststore: {exc}") from None
    client_auth = str(config["ssl.client.auth"]).lower()
    if client_auth != "none" and not (trust or trust_inline):
        raise ChronologError(f"ssl.client.auth={client_auth} needs ssl.truststore.location (the CAs that "
                             "sign client certificates)")
    ctx.verify_mode = CLIENT_AUTH[client_auth]
    return ctx


def _load_inline(ctx: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """ssl's load_cert_chain reads files only: a private 0600 temp file that lives for the call."""
    import tempfile  # (with shutil and its archive codecs) only for a key given inline

    fd, path = tempfile.mkstemp(prefix="chronolog-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(key.strip() + "\n" + chain.strip() + "\n")
        ctx.load_cert_chain(path, password=password)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


# -- principals from certificates ------------------------------------------------------------------------
_SHORT = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "localityName": "L",
          "stateOrProvinceName": "ST", "countryName": "C", "streetAddress": "STREET", "domainComponent": "DC",
          "userId": "UID", "emailAddress": "EMAILADDRESS"}


def distinguished_name(cert: dict) -> str:
    """RFC 2253 string of `SSLSocket.getpeercert()`'s subject (most specific RDN first)."""
    rdns = []
    for rdn in reversed(cert.get("subject", ())):
        parts = []
        for key, value in rdn:
            escaped = re.sub(r'([,+"\\<>;=])', r"\\\1", value)
            parts.append(f"{_SHORT.get(key, key)}={escaped}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def common_name(cert: dict) -> str | None:
    for rdn in reversed(cert.get("subject", ())):
        for key, value in rdn:
            if key == "commonName":
                return value
    return None


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""


_RULE = re.compile(r"RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU])?")


def parse_mapping_rules(value: str) -> list[_Rule]:
    rules: list[_Rule] = []
    text = (value or "DEFAULT").strip()
    while text:
        if text.startswith("DEFAULT"):
            rules.append(_Rule(None))
            text = text[len("DEFAULT"):]
        else:
            m = _RULE.match(text)
            if m is None:
                raise ChronologError(f"ssl.principal.mapping.rules: cannot parse {text!r}")
            replacement = re.sub(r"\$(\d)", r"\\\1", m[2])
            rules.append(_Rule(re.compile(m[1]), replacement, m[3] or ""))
            text = text[m.end():]
        text = text.lstrip(" ,\n")
    return rules


def principal_from_cert(cert: dict | None, rules: list[_Rule]) -> str:
    """`User:ANONYMOUS` without a certificate (ssl.client.auth=none or a client that sent none)."""
    if not cert:
        return "User:ANONYMOUS"
    dn = distinguished_name(cert)
    for rule in rules:
        if rule.pattern is None:
            return f"User:{common_name(cert) or dn}"
        m = rule.pattern.fullmatch(dn)
        if m is not None:
            name = m.expand(rule.replacement)
            name = name.lower() if rule.case == "L" else name.upper() if rule.case == "U" else name
            return f"User:{name}"
    raise ChronologError(f"no ssl.principal.mapping.rules rule matches {dn!r}")
