// Baseline for `lmtrain bench tokenizer`: encodes the same documents with the npm `tiktoken`
// package (the WASM build of OpenAI's Rust core) via encode_ordinary, single-threaded, and prints
// one JSON line with MB/s (10^6 bytes of UTF-8 input per second), measured as lmtrain measures it:
// one untimed warm-up pass, then the median of --iters passes.
//
//   node bench.mjs --input FILE [--encoding cl100k_base] [--ranks FILE.tiktoken] [--iters 3]
//   node bench.mjs --input FILE --tokenizer-json tok.json [--iters 3]
// FILE is JSONL (one {"text": ...} per line) or plain text (one document).
// --ranks loads the ranks from a .tiktoken file (with the encoding's pattern and specials) instead
// of the package's bundled copy; the two are byte-identical for OpenAI's encodings.
// --tokenizer-json runs a byte-level BPE tokenizer.json (as `lmtrain tokenizer train` writes it)
// on tiktoken's core: token bytes become ranks (id order must be merge order, which it checks) and
// the Split regex the pattern. No normalizer is allowed (tiktoken has none).
import fs from 'node:fs';
import os from 'node:os';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const args = process.argv.slice(2);
const opt = (name, dflt) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : dflt; };
const input = opt('--input');
const encoding = opt('--encoding', 'cl100k_base');
const ranksFile = opt('--ranks');
const tokenizerJson = opt('--tokenizer-json');
const iters = Number(opt('--iters', '3'));
if (!input) { console.error('usage: node bench.mjs --input FILE [--encoding cl100k_base] [--ranks F] [--iters 3]'); process.exit(2); }

const raw = fs.readFileSync(input, 'utf8');
let docs;
const firstLine = raw.split('\n').find((l) => l.trim() !== '') || '';
let jsonl = input.endsWith('.jsonl') || input.endsWith('.ndjson');
if (!jsonl) { try { const o = JSON.parse(firstLine); jsonl = o !== null && typeof o.text === 'string'; } catch { /* plain */ } }
if (jsonl) docs = raw.split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l).text);
else docs = [raw];
const bytes = docs.reduce((s, d) => s + Buffer.byteLength(d, 'utf8'), 0);

// "! <first rank> b64 b64 ..." rows: the compact rank form the Tiktoken constructor takes.
const packRanks = (entries) => {  // entries: [base64, rank], ascending rank
  let packed = '', prev = -2, row = [];
  for (const [b64, rank] of entries) {
    if (rank !== prev + 1) { if (row.length) packed += row.join(' ') + '\n'; row = ['!', String(rank)]; }
    row.push(b64); prev = rank;
  }
  return packed + row.join(' ') + '\n';
};

// GPT-2's byte-level alphabet, inverted: character -> byte.
const byteOfChar = (() => {
  const m = new Map();
  let next = 256;
  for (let b = 0; b < 256; ++b) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    m.set(String.fromCodePoint(printable ? b : next++), b);
  }
  return m;
})();

function fromTokenizerJson(file) {
  const tj = JSON.parse(fs.readFileSync(file, 'utf8'));
  const fail = (why) => { console.error(`${file}: ${why}`); process.exit(1); };
  if (tj.normalizer) fail('has a normalizer; tiktoken has none');
  const pres = tj.pre_tokenizer?.type === 'Sequence' ? tj.pre_tokenizer.pretokenizers : [tj.pre_tokenizer];
  const split = pres.find((p) => p?.type === 'Split');
  if (!split?.pattern?.Regex || !pres.some((p) => p?.type === 'ByteLevel')) fail('not a byte-level BPE with a Split regex');
  const vocab = tj.model.vocab;
  const entries = Object.entries(vocab).map(([text, id]) => {
    const bytes = [...text].map((c) => byteOfChar.get(c));
    if (bytes.some((b) => b === undefined)) fail(`token ${JSON.stringify(text)} is not byte-level text`);
    return [Buffer.from(bytes).toString('base64'), id];
  }).sort((a, b) => a[1] - b[1]);
  let last = -1;
  for (const m of tj.model.merges) {
    const [a, b] = Array.isArray(m) ? m : m.split(' ');
    const id = vocab[a + b];
    if (!(id > last)) fail('token ids are not in merge order, so they cannot serve as tiktoken ranks');
    last = id;
  }
  const specials = {};
  for (const t of tj.added_tokens || []) specials[t.content] = t.id;
  const { Tiktoken } = require('tiktoken/lite');
  return new Tiktoken(packRanks(entries), specials, split.pattern.Regex);
}

let enc;
if (tokenizerJson) {
  enc = fromTokenizerJson(tokenizerJson);
} else if (ranksFile) {
  const { Tiktoken } = require('tiktoken/lite');
  const bundled = require(`tiktoken/encoders/${encoding}.json`);
  const entries = fs.readFileSync(ranksFile, 'utf8').split('\n').filter((l) => l).map((l) => {
    const [b64, r] = l.split(' ');
    return [b64, Number(r)];
  });
  const packed = packRanks(entries);
  enc = new Tiktoken(packed, bundled.special_tokens, bundled.pat_str);
} else {
  const { get_encoding } = require('tiktoken');
  enc = get_encoding(encoding);
}

const pass = () => {
  let tokens = 0;
  const t0 = process.hrtime.bigint();
  for (const d of docs) tokens += enc.encode_ordinary(d).length;
  return { seconds: Number(process.hrtime.bigint() - t0) / 1e9, tokens };
};
pass();  // warm-up
const passes = [];
for (let i = 0; i < iters; ++i) passes.push(pass());
passes.sort((a, b) => a.seconds - b.seconds);
const med = passes[Math.floor(passes.length / 2)];
enc.free();
console.log(JSON.stringify({
  bench: 'tokenizer', impl: 'npm tiktoken@1.0.22 (WASM) encode_ordinary', tokenizer: tokenizerJson || ranksFile || encoding, input,
  documents: docs.length, threads: 1, iters, mb_per_s: bytes / 1e6 / med.seconds, tokens: med.tokens, bytes,
  seconds: med.seconds, node: process.version, cpu: os.cpus()[0].model,
}));
