#!/usr/bin/python3
"""Checks the frame-authentication test vectors of docs/comm-protocol.md
with Python's `cryptography` package, an implementation independent of
ferry's (OpenSSL through C++): the HKDF-SHA256 keys, and each frame's and
ABORT's tag (and ciphertext) under ChaCha20-Poly1305.

Usage: auth_vectors.py docs/comm-protocol.md
Exit 0: every vector agrees; 1: one does not (printed); 77: the module is
missing (printed), which the calling test reports as skipped.
"""
import re
import struct
import sys

try:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
except ImportError as e:  # python3-cryptography is in scripts/install-deps' test group
    print(f"skipped: Python's cryptography package is missing ({e})")
    sys.exit(77)


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def vectors(path):
    text = open(path, encoding="utf-8").read()
    block = text.split("<!-- auth test vectors begin -->", 1)[1].split("<!-- auth test vectors end -->", 1)[0]
    out = {}
    for line in block.splitlines():
        m = re.fullmatch(r"\s*([a-z_.]+)\s*=\s*([0-9a-f ]+)", line)
        if m:
            out[m.group(1)] = bytes.fromhex(m.group(2).replace(" ", ""))
    return out


def main():
    v = vectors(sys.argv[1])
    failures = []

    def expect(name, got):
        if v[name] != got:
            failures.append(f"{name}: the document says {v[name].hex()}, cryptography computes {got.hex()}")

    assert crc32c(b"123456789") == 0xE3069283
    salt = v["initiator_nonce"] + v["acceptor_nonce"]
    keys = {}
    for mode in ("frames", "encrypt"):
        for sender in ("initiator", "acceptor"):
            info = f"ferry-comm-2 {mode} {sender}".encode()
            keys[mode, sender] = HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(v["secret"])
            expect(f"{mode}.{sender}", keys[mode, sender])

    def nonce(counter):
        return bytes(4) + struct.pack("<Q", counter)

    payload = v["payload"]
    for mode in ("frames", "encrypt"):
        frame = v[f"{mode}.frame"]
        header = frame[:28]
        flags = header[5]
        if flags & 0x30 != (0x10 if mode == "frames" else 0x30):
            failures.append(f"{mode}.frame: flag bits 4-5 are {flags >> 4 & 3:02b}")
        aead = ChaCha20Poly1305(keys[mode, "initiator"])
        if mode == "frames":
            sealed = header + payload + aead.encrypt(nonce(0), b"", header + payload)
        else:
            sealed = header + aead.encrypt(nonce(0), payload, header)
            if aead.decrypt(nonce(0), frame[28:], header) != payload:
                failures.append("encrypt.frame does not decrypt to the payload")
        expect(f"{mode}.frame", sealed)

    # ABORTs: frames mode from the acceptor at its counter 0, encrypt mode
    # from the initiator at counter 1 (after the frame above).
    for mode, sender, counter in (("frames", "acceptor", 0), ("encrypt", "initiator", 1)):
        message = v[f"{mode}.abort"][:32]
        if struct.unpack("<I", message[28:32])[0] != crc32c(message[:28]):
            failures.append(f"{mode}.abort: its CRC32C is wrong")
        tag = ChaCha20Poly1305(keys[mode, sender]).encrypt(nonce(counter), b"", message)
        expect(f"{mode}.abort", message + tag)

    for f in failures:
        print(f)
    if not failures:
        print(f"{len(v)} vectors agree with Python's cryptography")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
