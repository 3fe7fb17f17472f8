#include "tools/tokenizer_corpus.h"

namespace mlaserve {

const char* const kTokenizerCorpus = R"corpus(
The model reads the prompt once, writes a small latent vector for every token into its cache,
and then produces one new token at a time. Each step reads the weights of the experts that the
router chose, and the cost of that step is mostly the time it takes to stream those weights
from memory. When many users share the same step, the weights are read once for all of them,
so the server can answer more people in the same second. That is the whole idea of batching.

A mixture of experts keeps many small feed-forward networks and sends each token to a few of
them. The router scores every expert, keeps the best groups, and then the best experts inside
those groups. The chosen experts run, their outputs are weighted and added, and a shared
expert that every token visits is added on top. The result goes back into the residual stream.

Multi-head latent attention compresses the keys and values of every token into one short
vector. Instead of storing a key and a value for every head, the cache stores this latent and
a small rotary key that all heads share. At decode time the query is moved into the latent
space, so each cached row is read once and used by every head of the layer.

The planner answers simple questions before anyone buys hardware: how many bytes the weights
take, how much memory the cache needs for a given context and number of users, whether the
model fits on one node, and what a million tokens will cost at the measured speed.

def softmax(values):
    largest = max(values)
    exps = [math.exp(v - largest) for v in values]
    total = sum(exps)
    return [e / total for e in exps]

for (int layer = 0; layer < num_layers; ++layer) {
    hidden = attention(norm(hidden), cache, position) + hidden;
    hidden = experts(norm(hidden)) + hidden;
}

Numbers appear everywhere: 1024 input tokens, 400 output tokens, 8 devices, 96 heads, 12 heads
per rank, 2.8 trillion parameters, 1.45 terabytes of weights, 288 gigabytes per card, and a
price of 2.5 dollars per hour. The year is 2026 and the date is 11/30.

Questions and answers: What is the time to first token? It is the delay between sending the
request and receiving the first piece of the answer. What is the throughput? It is the number
of tokens produced per second by the whole server, for all users together.

机器学习模型在服务器上运行。每个请求都会得到一个回答。
)corpus";

}  // namespace mlaserve
