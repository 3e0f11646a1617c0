// Stream a chat reply from any OpenAI-compatible server with the official `openai` package.
//
//   npx tsx chat.ts                                                  # llmserve-ref serve
//   OPENAI_BASE_URL=http://localhost:11434/v1 MODEL=tiny npx tsx chat.ts   # Ollama
//   OPENAI_BASE_URL=http://localhost:8080/v1 npx tsx chat.ts               # llama-server
import OpenAI from "openai";

// llama.cpp's llama-server (and llmserve-ref) add these to the last chunk; Ollama does not.
interface Timings {
  prompt_n: number;
  prompt_ms: number;
  prompt_per_second: number;
  predicted_n: number;
  predicted_ms: number;
  predicted_per_second: number;
}

const client = new OpenAI({
  baseURL: process.env.OPENAI_BASE_URL || "http://127.0.0.1:8000/v1",
  apiKey: process.env.OPENAI_API_KEY ?? "none", // local servers ignore it; the client wants one
});
const model = process.env.MODEL ?? "tiny";
const prompt = process.argv[2] ?? "Tell me a story about Zoé.";

const sent = performance.now();
let firstToken: number | undefined;
let usage: OpenAI.CompletionUsage | undefined;
let timings: Timings | undefined;

const stream = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: prompt }],
  max_tokens: 60,
  stream: true,
  stream_options: { include_usage: true }, // a last chunk with the token counts
});
for await (const chunk of stream) {
  const text = chunk.choices[0]?.delta?.content;
  if (text) {
    firstToken ??= performance.now();
    process.stdout.write(text); // each token as it arrives
  }
  usage = chunk.usage ?? usage;
  timings = (chunk as { timings?: Timings }).timings ?? timings;
}
const done = performance.now();

console.log();
if (firstToken !== undefined) {
  console.log(
    `[client] first token after ${(firstToken - sent).toFixed(0)} ms, ` +
      `whole reply after ${(done - sent).toFixed(0)} ms`,
  );
}
if (usage) {
  console.log(`[usage] ${usage.prompt_tokens} prompt tokens, ${usage.completion_tokens} completion tokens`);
}
if (timings) {
  console.log(
    `[timings] prompt: ${timings.prompt_n} tokens, ${timings.prompt_per_second.toFixed(0)} tokens/s; ` +
      `generation: ${timings.predicted_n} tokens, ${timings.predicted_per_second.toFixed(0)} tokens/s`,
  );
} else {
  console.log("[timings] none: this server sends no llama.cpp timings");
}
