"""Independent verifiers: the test vectors and receipts posted to a running kuitti, checked by
kuitti, by jwcrypto and by Node's jose, each running the ten-line verifier docs/signing.md
gives partners; and the proofs that receipts are in the receipt log, checked by kuitti and by
the two proof checkers docs/signing.md gives (their own RFC 9162 path computation, jwcrypto
and jose for the tree head's signature)."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from pypdf import PdfReader

from kuitti import signatures
from kuitti.receipts import log
from kuitti.services import Services
from tests.factories import auth, make_partner, receipt_doc
from tests.receipts.formats.support import decoded_codes, pdf_pages_png, pdf_text
from tests.test_cli import run

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "docs" / "signing-vectors.json"
NODE_MODULES = ROOT / "tests" / "js" / "node_modules"


def snippet(language: str, which: int = 0) -> str:
    """The verifier in ``language`` as docs/signing.md gives it: the signature's (0, ten lines
    at most) or the receipt log's proof's (1)."""
    text = (ROOT / "docs" / "signing.md").read_text(encoding="utf-8")
    found = re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)
    assert len(found) > which, f"docs/signing.md has no {language} verifier {which}"
    code: str = found[which]
    if which == 0:
        assert len([line for line in code.splitlines() if line.strip()]) <= 10
    return code


@pytest.fixture(scope="module")
def verifiers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The command of each independent verifier, to which the saved receipt and the JWKS are
    appended."""
    node = shutil.which("node")
    assert node is not None, "Node.js is missing: run scripts/system-deps"
    assert (NODE_MODULES / "jose").is_dir(), "Node's jose is missing: run scripts/system-deps"
    folder = tmp_path_factory.mktemp("verifiers")
    (folder / "node_modules").symlink_to(NODE_MODULES)
    (folder / "verify.py").write_text(snippet("python"), encoding="utf-8")
    (folder / "verify.mjs").write_text(snippet("javascript"), encoding="utf-8")
    (folder / "proof.py").write_text(snippet("python", 1), encoding="utf-8")
    (folder / "proof.mjs").write_text(snippet("javascript", 1), encoding="utf-8")
    return {
        "jwcrypto": [sys.executable, str(folder / "verify.py")],
        "jose": [node, str(folder / "verify.mjs")],
        "jwcrypto proof": [sys.executable, str(folder / "proof.py")],
        "jose proof": [node, str(folder / "proof.mjs")],
    }


def independent_verdicts(
    verifiers: dict[str, list[str]], saved: bytes, keys: dict[str, Any], tmp_path: Path
) -> dict[str, bool]:
    """Whether each independent verifier accepts ``saved``."""
    return _outcomes(verifiers, saved, keys, tmp_path, proofs=False)


def independent_proofs(
    verifiers: dict[str, list[str]], saved: bytes, keys: dict[str, Any], tmp_path: Path
) -> dict[str, bool]:
    """Whether each independent proof checker finds ``saved`` in the receipt log."""
    return _outcomes(verifiers, saved, keys, tmp_path, proofs=True)


def _outcomes(
    verifiers: dict[str, list[str]],
    saved: bytes,
    keys: dict[str, Any],
    tmp_path: Path,
    *,
    proofs: bool,
) -> dict[str, bool]:
    saved_file, keys_file = tmp_path / "saved.json", tmp_path / "keys.json"
    saved_file.write_bytes(saved)
    keys_file.write_bytes(orjson.dumps(keys))
    said = "in the log since" if proofs else "genuine:"
    verdicts = {}
    for name, command in verifiers.items():
        if name.endswith(" proof") != proofs:
            continue
        done = subprocess.run(
            [*command, str(saved_file), str(keys_file)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        verdicts[name] = done.returncode == 0 and done.stdout.startswith(said)
    return verdicts


def test_every_vector_gets_its_verdict_from_every_verifier(
    verifiers: dict[str, list[str]], tmp_path: Path
) -> None:
    data = orjson.loads(VECTORS.read_bytes())
    assert set(data["vectors"]) == {
        "valid",
        "tampered_body",
        "tampered_header",
        "wrong_key",
        "unknown_key",
        "retired_key",
        "tampered_proof",
        "tampered_tree_head",
        "pending",
    }
    for name, vector in data["vectors"].items():
        saved = orjson.dumps(vector["saved"])
        verdict, _ = signatures.verify_saved(saved, data["keys"])
        assert verdict.status == vector["expect"], name
        genuine = vector["expect"] == signatures.VALID
        assert independent_verdicts(verifiers, saved, data["keys"], tmp_path) == {
            "jwcrypto": genuine,
            "jose": genuine,
        }, name
        if vector["log"] is not None:
            assert log.check_saved(saved, data["keys"])["log"]["status"] == vector["log"], name
            in_log = vector["log"] == log.IN_LOG
            assert independent_proofs(verifiers, saved, data["keys"], tmp_path) == {
                "jwcrypto proof": in_log,
                "jose proof": in_log,
            }, name
    retired = signatures.verify_saved(
        orjson.dumps(data["vectors"]["retired_key"]["saved"]), data["keys"]
    )[0]
    assert retired.key_status == "retired"


def test_receipts_posted_today_verify_anywhere_and_a_changed_byte_nowhere(
    client: httpx.Client, services: Services, verifiers: dict[str, list[str]], tmp_path: Path
) -> None:
    merchant = make_partner(services)
    doc = receipt_doc(receiptNumber="R-7", unknownKey="kept \u20ac \u2615")
    answer = client.post("/api/v1/receipts/", json=doc, headers=auth(merchant.api_key))
    assert answer.status_code == 200, answer.text
    receipt_id = answer.json()["receipt_id"]
    saved = client.get(
        f"/api/v1/receipts/{receipt_id}/signed_json/", headers=auth(merchant.api_key)
    ).content
    keys = client.get(signatures.JWKS_PATH).json()
    both = {"jwcrypto": True, "jose": True}
    assert independent_verdicts(verifiers, saved, keys, tmp_path) == both
    another = client.post("/api/v1/receipts/", json=receipt_doc(), headers=auth(merchant.api_key))
    assert another.status_code == 200, another.text
    assert log.seal_now(services.db, services.settings, now=services.clock.now()) is not None
    saved = client.get(
        f"/api/v1/receipts/{receipt_id}/signed_json/", headers=auth(merchant.api_key)
    ).content
    assert independent_verdicts(verifiers, saved, keys, tmp_path) == both
    proofs = {"jwcrypto proof": True, "jose proof": True}
    assert independent_proofs(verifiers, saved, keys, tmp_path) == proofs
    proof = orjson.loads(saved)["log"]
    head_path = [f"A{h[1:]}" if h[0] != "A" else f"B{h[1:]}" for h in proof["head_path"]]
    assert head_path  # the other receipt's batch is in the head too
    false = orjson.dumps({**orjson.loads(saved), "log": {**proof, "head_path": head_path}})
    assert independent_proofs(verifiers, false, keys, tmp_path) == {
        "jwcrypto proof": False,
        "jose proof": False,
    }

    data = orjson.loads(saved)
    payload = data["payload"]
    for changed in (
        payload.replace("R-7", "R-8"),
        payload.replace("kept", "kepT"),
        payload + " ",
    ):
        tampered = orjson.dumps({**data, "payload": changed})
        assert not signatures.verify_saved(tampered, keys)[0].valid
        assert independent_verdicts(verifiers, tampered, keys, tmp_path) == {
            "jwcrypto": False,
            "jose": False,
        }


def test_a_receipt_pdf_carries_its_signature_and_the_qr_code_of_its_check(
    client: httpx.Client, services: Services, verifiers: dict[str, list[str]], tmp_path: Path
) -> None:
    merchant = make_partner(services)
    answer = client.post("/api/v1/receipts/", json=receipt_doc(), headers=auth(merchant.api_key))
    assert answer.status_code == 200, answer.text
    receipt_id = answer.json()["receipt_id"]
    keys = client.get(signatures.JWKS_PATH).json()
    for layout in ("a4", "roll"):
        pdf = client.get(
            f"/api/v1/receipts/{receipt_id}/service_pdf/?layout={layout}&lang=fi",
            headers=auth(merchant.api_key),
        ).content
        attached = PdfReader(io.BytesIO(pdf)).attachments[signatures.SIGNED_FILE][0]
        assert signatures.verify_saved(attached, keys)[0].valid
        assert independent_verdicts(verifiers, attached, keys, tmp_path) == {
            "jwcrypto": True,
            "jose": True,
        }
        pdf_file, keys_file = tmp_path / f"{layout}.pdf", tmp_path / "published.json"
        pdf_file.write_bytes(pdf)
        keys_file.write_bytes(orjson.dumps(keys))
        checked = run(services, "receipts", "verify", str(pdf_file), "--keys", str(keys_file))
        assert checked.exit_code == 0, checked.output
        assert "Allekirjoittanut" in pdf_text(pdf)
        urls = [text for _, text in decoded_codes(pdf_pages_png(pdf, f"signed-{layout}"))]
        document = client.get(
            f"/api/v1/receipts/{receipt_id}/service_json/", headers=auth(merchant.api_key)
        ).content
        wanted = f"/verify?r={receipt_id}&h={signatures.fingerprint(document)}"
        assert [url for url in urls if url.endswith(wanted)] == [services.settings.issuer + wanted]
        assert "kuitti holds this receipt unchanged" in client.get(wanted + "&lang=en").text
