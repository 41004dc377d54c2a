// Regenerates tokens.json: npm install gpt-tokenizer@3 && node count.js
// (run from a directory where the package is installed; dir below is this folder).
const fs = require('fs'), path = require('path');
const o200k = require('gpt-tokenizer/cjs/encoding/o200k_base');
const cl100k = require('gpt-tokenizer/cjs/encoding/cl100k_base');
const dir = __dirname;
const res = {};
function count(enc, body) {
  // OpenAI cookbook recipe for gpt-4o style chat: 3 per message, each value
  // (role, content text, tool-call name and arguments) encoded, 3 to prime the reply.
  let n = 3;
  for (const m of body.messages) {
    n += 3 + enc.encode(m.role).length;
    const c = m.content;
    if (typeof c === 'string') n += enc.encode(c).length;
    else if (Array.isArray(c)) for (const p of c) if (p.text) n += enc.encode(p.text).length;
    for (const tc of m.tool_calls || []) n += enc.encode(tc.function.name).length + enc.encode(tc.function.arguments).length;
  }
  let tools = 0;
  if (body.tools) tools = enc.encode(JSON.stringify(body.tools)).length;
  return {prompt: n, tools};
}
for (const f of fs.readdirSync(dir).filter(f => f.endsWith('.json') && f !== 'tokens.json').sort()) {
  const body = JSON.parse(fs.readFileSync(path.join(dir, f)));
  res[f] = {o200k_base: count(o200k, body), cl100k_base: count(cl100k, body)};
}
fs.writeFileSync(path.join(dir, 'tokens.json'), JSON.stringify(res, null, 1) + '\n');
console.log(JSON.stringify(res));
