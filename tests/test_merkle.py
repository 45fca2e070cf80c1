"""The Merkle tree of the receipt log against RFC 9162 §2.1 as the RFC writes it: the
recursive MTH and PATH, here beside the level-by-level tree ``kuitti.merkle`` builds, for every
tree size up to 70 and every leaf of it."""

from __future__ import annotations

import hashlib

from kuitti import merkle


def mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 §2.1.1, as written."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1 << ((n - 1).bit_length() - 1)  # the largest power of two smaller than n
    return hashlib.sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()


def rfc_path(m: int, leaves: list[bytes]) -> list[bytes]:
    """RFC 9162 §2.1.3.1, as written."""
    n = len(leaves)
    if n == 1:
        return []
    k = 1 << ((n - 1).bit_length() - 1)
    if m < k:
        return [*rfc_path(m, leaves[:k]), mth(leaves[k:])]
    return [*rfc_path(m - k, leaves[k:]), mth(leaves[:k])]


def test_roots_and_paths_are_rfc_9162s() -> None:
    for size in range(71):
        leaves = [f"leaf {i}".encode() for i in range(size)]
        hashes = [merkle.leaf_hash(leaf) for leaf in leaves]
        assert merkle.root(hashes) == mth(leaves), size
        tree = merkle.levels(hashes)
        for index in range(size):
            audit = merkle.path(tree, index)
            assert audit == rfc_path(index, leaves), (size, index)
            assert merkle.root_from_path(index, size, hashes[index], audit) == mth(leaves)


def test_a_path_proves_nothing_for_another_leaf_place_or_size() -> None:
    leaves = [merkle.leaf_hash(bytes([i])) for i in range(13)]
    tree = merkle.levels(leaves)
    root = tree[-1][0]
    audit = merkle.path(tree, 5)
    assert merkle.root_from_path(5, 13, leaves[5], audit) == root
    assert merkle.root_from_path(5, 13, leaves[6], audit) != root  # another leaf
    assert merkle.root_from_path(4, 13, leaves[5], audit) != root  # another place
    assert merkle.root_from_path(5, 6, leaves[5], audit) != root  # another tree
    changed = [audit[0][:-1] + bytes([audit[0][-1] ^ 1]), *audit[1:]]
    assert merkle.root_from_path(5, 13, leaves[5], changed) != root  # one bit of the path
    assert merkle.root_from_path(5, 13, leaves[5], audit[:-1]) is None  # too short
    assert merkle.root_from_path(5, 13, leaves[5], [*audit, root]) is None  # too long
    assert merkle.root_from_path(13, 13, leaves[5], audit) is None  # outside the tree
    assert merkle.root_from_path(5, 13, leaves[5], [b"short", *audit[1:]]) is None
