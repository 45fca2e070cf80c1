// Verifies saved kuitti receipts (flattened JWS JSON, RFC 7797) with Node's jose: reads
// {"jwks": {...}, "saved": [<saved receipt>, ...]} on stdin, prints one verdict per receipt.
import { createLocalJWKSet, flattenedVerify } from "jose";

const input = JSON.parse(await new Response(process.stdin).text());
const keys = createLocalJWKSet(input.jwks);
const verdicts = [];
for (const saved of input.saved) {
  try {
    const { protectedHeader } = await flattenedVerify(saved, keys, { algorithms: ["ES256"] });
    verdicts.push({ valid: protectedHeader.typ === "receipt+jws", kid: protectedHeader.kid });
  } catch (error) {
    verdicts.push({ valid: false, error: error.code ?? String(error) });
  }
}
console.log(JSON.stringify(verdicts));
