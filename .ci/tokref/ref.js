// Reference token ids for the BPE tests: reads samples (one line each, ":"
// and the base64 of the sample's raw bytes) on stdin, decodes each as UTF-8 with
// replacement (TextDecoder: one U+FFFD per maximal ill-formed subpart),
// and writes each one's ids as a JSON array a line.
//
// Usage: node ref.js hf FILE.json [add_special]   (Hugging Face tokenizers)
//        node ref.js tiktoken ENCODING [all|ordinary]
//        node ref.js bench-hf FILE.json | bench-tiktoken ENCODING   (tokens/s)
const fs = require("fs");
const path = require("path");
const [mode, arg, opt] = process.argv.slice(2);
// ignoreBOM: a leading U+FEFF stays, as in Python's decode("utf-8").
const dec = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const input = fs.readFileSync(0, "utf8").split("\n").filter((l) => l !== "").map((l) => l.slice(1));
const texts = input.map((l) => dec.decode(Buffer.from(l, "base64")));
// TOKREF_DIR is the directory install.sh prints.
const mod = (m) => require(path.join(process.env.TOKREF_DIR, "node_modules", m));

async function main() {
  let encode;
  if (mode === "hf" || mode === "bench-hf") {
    const { Tokenizer } = mod("tokenizers");
    const tok = Tokenizer.fromFile(arg);
    const add = opt === "add_special";
    encode = async (t) => (await tok.encode(t, null, { addSpecialTokens: add })).getIds();
  } else {
    const { get_encoding } = mod("tiktoken");
    const enc = get_encoding(arg);
    encode = opt === "ordinary" ? (t) => enc.encode_ordinary(t) : (t) => enc.encode(t, "all");
  }
  if (mode.startsWith("bench")) {
    let tokens = 0;
    const start = process.hrtime.bigint();
    for (const t of texts) tokens += (await encode(t)).length;
    const s = Number(process.hrtime.bigint() - start) / 1e9;
    let bytes = 0;
    for (const l of input) bytes += Buffer.from(l, "base64").length;
    process.stdout.write(JSON.stringify({ tokens, seconds: s, bytes }) + "\n");
    return;
  }
  const out = [];
  for (const t of texts) out.push(JSON.stringify(Array.from(await encode(t))));
  process.stdout.write(out.join("\n") + "\n");
}
main().catch((e) => { console.error(e); process.exit(1); });
