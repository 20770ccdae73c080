// JS reference for compactrl's tokenizer and chat-template parity tests.
//
// Reads one JSON request on stdin:
//   {"dir": "<folder with tokenizer.json and tokenizer_config.json>",
//    "texts": ["..."],                        encoded with add_special_tokens: false
//    "chats": [{"template": "<jinja source, or empty for tokenizer_config's>",
//               "messages": [{"role", "content"}], "add_generation_prompt": true}],
//    "bench": {"text": "...", "reps": 3}}      optional: encode tokens/s
// and writes {"ids": [[...]], "decoded": ["..."], "chats": [{"text", "ids"}], "bench": {...}}.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";
import { Template } from "@huggingface/jinja";

const req = JSON.parse(readFileSync(0, "utf8"));
const tokenizerJSON = JSON.parse(readFileSync(join(req.dir, "tokenizer.json"), "utf8"));
const tokenizerConfig = JSON.parse(readFileSync(join(req.dir, "tokenizer_config.json"), "utf8"));
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const enc = (s) => tok.encode(s, { add_special_tokens: false });
const content = (t) => (t == null ? "" : typeof t === "string" ? t : t.content);

const out = { ids: [], decoded: [], chats: [] };
for (const s of req.texts ?? []) {
  const ids = enc(s);
  out.ids.push(ids);
  out.decoded.push(ids.length ? tok.decode(ids, { clean_up_tokenization_spaces: false }) : "");
}
for (const c of req.chats ?? []) {
  const src = c.template || tokenizerConfig.chat_template;
  const text = new Template(src).render({
    messages: c.messages,
    add_generation_prompt: c.add_generation_prompt,
    bos_token: content(tokenizerConfig.bos_token),
    eos_token: content(tokenizerConfig.eos_token),
  });
  out.chats.push({ text, ids: enc(text) });
}
if (req.bench) {
  enc(req.bench.text); // warm the caches as the Go benchmark does
  let n = 0;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < req.bench.reps; i++) n += enc(req.bench.text).length;
  const sec = Number(process.hrtime.bigint() - t0) / 1e9;
  out.bench = { tokens: n, seconds: sec, tokens_per_second: n / sec };
}
process.stdout.write(JSON.stringify(out));
