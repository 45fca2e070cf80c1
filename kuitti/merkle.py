"""Merkle trees as Certificate Transparency builds them (RFC 9162 §2.1): the hashes, the
audit paths of every leaf at once, and the check of an inclusion proof.

A leaf's hash is SHA-256(0x00 || leaf) and a node's SHA-256(0x01 || left || right); a tree of
``n`` leaves splits at the largest power of two below ``n``. That tree is the one built level
by level, pairing neighbours from the left and lifting a last node without a neighbour
unchanged to the next level, which is how ``levels`` builds it: each leaf's audit path is then
its neighbour at each level where it has one, bottom up, the order RFC 9162's verification
algorithm (``root_from_path``) takes them in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

HASH_SIZE = 32
_LEAF = b"\x00"
_NODE = b"\x01"


def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(_LEAF + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(_NODE + left + right).digest()


def levels(leaf_hashes: Sequence[bytes]) -> list[list[bytes]]:
    """Every level of the tree over ``leaf_hashes``, from the leaves (first) to the root (last,
    one hash). An empty tree has no levels."""
    if not leaf_hashes:
        return []
    tree = [list(leaf_hashes)]
    sha256 = hashlib.sha256
    while len(level := tree[-1]) > 1:
        upper = [
            sha256(_NODE + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)
        ]
        if len(level) % 2:
            upper.append(level[-1])
        tree.append(upper)
    return tree


def root(leaf_hashes: Sequence[bytes]) -> bytes:
    """The tree's root hash (RFC 9162's MTH); the hash of the empty string for no leaves."""
    if not leaf_hashes:
        return hashlib.sha256(b"").digest()
    return levels(leaf_hashes)[-1][0]


def path(tree: list[list[bytes]], index: int) -> list[bytes]:
    """The audit path of leaf ``index`` in a tree built by ``levels``, bottom up."""
    found = []
    for level in tree[:-1]:
        sibling = index ^ 1
        if sibling < len(level):
            found.append(level[sibling])
        index >>= 1
    return found


def root_from_path(index: int, size: int, leaf: bytes, audit_path: Sequence[bytes]) -> bytes | None:
    """The root that ``audit_path`` proves the leaf hash ``leaf`` at ``index`` in a tree of
    ``size`` leaves to be under (RFC 9162 §2.1.3.2); None when the path cannot be one of such a
    tree. The caller compares the root with the one it trusts."""
    if not 0 <= index < size:
        return None
    fn, sn, result = index, size - 1, leaf
    for sibling in audit_path:
        if sn == 0 or len(sibling) != HASH_SIZE:
            return None
        if fn & 1 or fn == sn:
            result = node_hash(sibling, result)
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            result = node_hash(result, sibling)
        fn >>= 1
        sn >>= 1
    return result if sn == 0 else None


def split(blob: bytes) -> list[bytes]:
    """Hashes stored one after another (a batch's leaves, a path) back into a list."""
    return [blob[i : i + HASH_SIZE] for i in range(0, len(blob), HASH_SIZE)]
