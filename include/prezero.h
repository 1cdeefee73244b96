/* prezero public C11 API: status codes, opaque engine handle and config structs.
 * Every call returns a pz_status; pz_last_error() gives the detailed message of the most
 * recent failure on the calling thread. Nothing in the library calls exit() or abort(). */
#ifndef PREZERO_H
#define PREZERO_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
/* PZ_VERSION, PZ_API, pz_status, pz_status_string, pz_last_error, pz_elem_type. */
#include "prezero/common.h"
#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ decode engine
 * An engine holds one model's per-rank decode graph (MLA + MoE layouts: DeepSeek-V2, V2-Lite, V3,
 * Kimi-K2 / K2.5; GQA layouts: Llama, Mistral, Qwen2 / Qwen3 (dense and MoE), Mixtral, Phi-3 / Phi-4, dots.llm1, GLM-4.5) after the graph passes, plus the storage of every TP rank: seeded random weights
 * and a KV cache pre-filled with seeded random content up to `context` tokens per sequence.
 * pz_engine_step() runs one greedy decode step for a batch. */
typedef struct pz_engine pz_engine;

typedef enum pz_device_kind {
  PZ_DEVICE_CPU = 0,   /* reference backend: all TP ranks in this process, fp32 accumulation */
  PZ_DEVICE_CUDA = 1   /* GPU backend: TP rank r on CUDA device r, CUDA graphs per batch size
                          (PZ_ERR_UNSUPPORTED in a build without CUDA) */
} pz_device_kind;

/* Number of CUDA GPUs this build can use: 0 in a CPU-only build or when none is visible. */
PZ_API int pz_gpu_count(void);

/* Largest batch (sequences per step) an engine may be created for. */
#define PZ_ENGINE_MAX_BATCH 256

/* pz_engine_config.quant values. */
enum { PZ_QUANT_AUTO = 0, PZ_QUANT_BF16 = 1, PZ_QUANT_INT4 = 2, PZ_QUANT_FP8 = 3 };

typedef struct pz_engine_config {
  const char *model;     /* preset name (e.g. "tiny", "kimi_k2", "kimi_k25", "deepseek_v3",
                            "deepseek_v2_lite", "llama3_1_8b", "qwen3_30b_a3b"; `prezero run --help`
                            lists all) or a config.json path; NULL = "tiny" (embedded, needs no file);
                            "" is PZ_ERR_INVALID_ARG */
  int tp;                /* tensor-parallel degree; must divide num_attention_heads (and the
                            intermediate sizes and vocab_size) */
  int max_batch;         /* sequences per step, 1..PZ_ENGINE_MAX_BATCH */
  int context;           /* tokens already in each sequence's KV cache before the first step,
                            0..max_position_embeddings-1 */
  int max_steps;         /* decode steps the KV cache has room for: capacity = context + max_steps
                            tokens, which must not exceed max_position_embeddings */
  int layers;            /* build only the first N layers, 1..num_hidden_layers; 0 = all */
  uint64_t seed;         /* weights and KV-cache contents are a pure function of the seed */
  int prezero;           /* -1: from PREZERO_ENABLE (off when unset); 0: off; 1: on */
  pz_device_kind device;
  int threads;           /* CPU worker threads, 1..1024; 0 = PREZERO_CPU_THREADS when set, else the
                            number of cores capped at 64 */
  const char *model_dir; /* NULL, or a Hugging Face checkpoint directory: config.json plus
                            model.safetensors or model.safetensors.index.json with its shards
                            (BF16, F16, F32, block-scaled F8_E4M3, or compressed-tensors
                            pack-quantized INT4 as its quantization_config says; the README's
                            checkpoint section lists what is read). The config then comes from it
                            (`model` is ignored) and the weights are loaded from it instead of the
                            seed; "" is PZ_ERR_INVALID_ARG; errors as pz_checkpoint_open / pz_checkpoint_plan describe:
                            PZ_ERR_IO (also a NaN, infinite or huge FP8 weight_scale_inv, or a
                            path that is not a regular file), PZ_ERR_NOT_FOUND, PZ_ERR_SHAPE, PZ_ERR_DTYPE. On CUDA the host
                            converts the weights (threads workers) and copies them to each rank's
                            GPU through two bounded staging buffers; a model whose shapes the CUDA
                            kernels do not take fails with PZ_ERR_UNSUPPORTED or PZ_ERR_SHAPE.
                            A load that takes longer than a second prints a progress bar on
                            stderr (PREZERO_PROGRESS=0 in the environment turns it off). */
  int quant;             /* storage of the routed experts' synthetic weights (`--quant`): PZ_QUANT_AUTO
                            (0, as the model's quantization_config says: kimi_k25 INT4), PZ_QUANT_BF16,
                            PZ_QUANT_INT4 (compressed-tensors W4A16, group 32) or PZ_QUANT_FP8 (e4m3,
                            128x128 block scales, W8A16); the seeded bf16 model's experts quantised.
                            Not with model_dir (a checkpoint's weights come as stored):
                            PZ_ERR_INVALID_ARG. On CUDA, INT4 experts run the W4A16 kernels
                            and FP8 experts the W8A16 ones (backend/cuda/moe_q.h). */
  const struct pz_runtime_opts *options; /* every other switch (prezero_options.h), copied at
                            creation; NULL: read from the PREZERO_* environment then (a malformed
                            value is PZ_ERR_INVALID_ARG). prezero = -1 takes options->prezero. */
  /* One TP rank per process (CUDA only; prezero/allreduce.h). id_file NULL (the default): this
   * process runs every rank. Else it runs only rank `rank` (0..tp-1) of a group of tp processes,
   * each creating its engine with the same config, on GPU rank % (visible GPUs) (two ranks on
   * one GPU work: CUDA IPC within a device is legal). Rank 0 makes the communicator's unique id
   * and writes it to id_file (a path every rank sees; use a fresh one per run), the others wait
   * for it; rank 0 removes it, and the rendezvous, in pz_engine_destroy. The engine's calls are
   * then collective: create, step, logits and destroy must be called by every rank, in the same
   * order, with the same arguments; every rank gets the same tokens and logits. timeout_ms bounds
   * the rendezvous and every wait on a peer (<= 0: 60000): a peer that exits or stops gives
   * PZ_ERR_TIMEOUT, not a hang. Layer fitting (layers = 0) takes the fewest layers any rank fits.
   * Creation checks that every rank was created with the same seed, max_batch, context,
   * max_steps, layers, prezero and quant, planned the same bytes, and built the same decode graph
   * (a fingerprint of its nodes, shapes and exact parameters): a rank with another config, layers
   * or PREZERO_* pass option makes every rank's creation fail with PZ_ERR_INVALID_ARG naming the
   * difference, at once rather than at the timeout. */
  const char *id_file;
  int rank;
  int timeout_ms;
} pz_engine_config;
struct pz_runtime_opts;
/* Every field, so that -Wextra is quiet; in C++ by position (designated initializers are C++20,
 * and -pedantic warns about them before), in the order of the struct above. */
#ifdef __cplusplus
#define PZ_ENGINE_CONFIG_INIT \
  {NULL, 1, 4, 128, 64, 0, 1234, -1, PZ_DEVICE_CPU, 0, NULL, PZ_QUANT_AUTO, NULL, NULL, 0, 0}
#else
#define PZ_ENGINE_CONFIG_INIT                                                             \
  {.model = NULL, .tp = 1, .max_batch = 4, .context = 128, .max_steps = 64, .layers = 0, \
   .seed = 1234, .prezero = -1, .device = PZ_DEVICE_CPU, .threads = 0, .model_dir = NULL, \
   .quant = PZ_QUANT_AUTO, .options = NULL, .id_file = NULL, .rank = 0, .timeout_ms = 0}
#endif

/* What an engine was built with (resolved values). */
typedef struct pz_engine_info {
  char model[64];        /* preset name or the config's model_type */
  int tp, max_batch, n_layers, prezero; /* prezero: 1 when the prezero pass was on and not disabled, else 0 */
  int64_t hidden_size, vocab_size;     /* elements; tokens */
  int64_t context, max_ctx;       /* tokens: pre-filled, and KV-cache capacity per sequence */
  int64_t weight_bytes;           /* bytes of weights over all ranks (bf16/f32 as stored) */
  int64_t kv_cache_bytes;         /* bytes of KV cache over all ranks and layers */
  pz_device_kind device;
  int model_layers;               /* num_hidden_layers of the model */
  int layers_fitted;              /* 1: layers was 0 on CUDA and only n_layers < model_layers fit in
                                     the GPUs' free memory (the engine runs those) */
  int64_t device_bytes_per_rank;  /* CUDA: device storage of each rank (bytes); 0 on the CPU */
  char gemm_table[1040];          /* CUDA: where the split-K GEMM choices come from: "cache <path>",
                                     "built-in" (the table compiled in for this GPU) or "none"
                                     (the heuristic); "" on the CPU */
  int rank;                       /* one rank per process (pz_engine_config.id_file): this process's
                                     TP rank; -1 when this process runs every rank */
} pz_engine_info;

/* Creates an engine: loads the config, builds and verifies the decode graph, runs the graph
 * passes (prezero when enabled), allocates and fills every rank's storage.
 * On PZ_DEVICE_CUDA with layers = 0, the engine runs as many leading layers as fit in every
 * GPU's free memory (info.layers_fitted says when that is fewer than the model has); layers = N
 * that does not fit is PZ_ERR_OOM with the bytes needed, the bytes free and how many fit.
 * Too few GPUs for tp: PZ_ERR_NO_DEVICE; no peer access between them: PZ_ERR_NO_P2P; an op
 * without a CUDA kernel in this build: PZ_ERR_UNSUPPORTED naming it.
 * Errors: PZ_ERR_INVALID_ARG (tp, max_batch, context, max_steps, layers, threads or prezero out of
 * range, model ""; the message names the value and the limit), PZ_ERR_CONFIG (malformed config.json, missing field,
 * wrong type, a key given twice, an integer field above 2^31-1 or more than 10000 layers, a
 * non-finite float, inconsistent values), PZ_ERR_NOT_FOUND (unknown preset), PZ_ERR_IO
 * (unreadable file), PZ_ERR_SHAPE (a tensor of more than 2^50 elements), PZ_ERR_OOM (on the CPU
 * also, before anything is allocated, when every rank's storage together exceeds the machine's
 * physical RAM; the message gives both in GiB), PZ_ERR_UNSUPPORTED (device not available).
 * *out is NULL on error. */
PZ_API pz_status pz_engine_create(const pz_engine_config *cfg, pz_engine **out);

/* One greedy decode step for sequences 0..m-1 (1 <= m <= max_batch): tokens_in[m] are the new
 * token ids (0..vocab_size-1), tokens_out[m] receives the argmax of the logits (lowest id on
 * ties). Each sequence's position advances by one; sequence i is at position context + the
 * number of steps that included it, or, after pz_engine_reset_sequence(e, i), the number of
 * steps that included it since that reset (pz_engine_position). Errors: PZ_ERR_INVALID_ARG (m
 * out of range, token id out of range, NULL pointer, or a sequence whose KV cache is full: a
 * later sequence's reset does not free it), PZ_ERR_IO (CPU: a logit is NaN or
 * infinite; CUDA: a row holds a NaN or its max is +infinity, read from the argmax without copying
 * the logits out; i.e. the weights or FP8 scales hold NaN / infinity or overflow; the step has run:
 * positions advanced and pz_engine_logits gives its logits), PZ_ERR_CUDA (a CUDA call of the step
 * failed), PZ_ERR_TIMEOUT (one process per rank: a peer did not arrive within the engine's timeout). */
PZ_API pz_status pz_engine_step(pz_engine *e, int m, const int32_t *tokens_in, int32_t *tokens_out);

/* Logits of the last step's m rows (m <= that step's m): out[m * vocab_size] f32, row-major,
 * gathered over the TP ranks. Errors: PZ_ERR_INVALID_ARG (no step yet, m too large, NULL),
 * PZ_ERR_CUDA (a copy failed), PZ_ERR_TIMEOUT (one process per rank: a peer did not arrive). */
PZ_API pz_status pz_engine_logits(const pz_engine *e, int m, float *out);

/* Fills *info. Errors: PZ_ERR_INVALID_ARG for NULL. */
PZ_API pz_status pz_engine_get_info(const pz_engine *e, pz_engine_info *info);

/* *pos = the position (tokens, 0-based) that sequence `seq`'s next step decodes at: the tokens
 * in its KV cache (the engine's context, plus one per step that included it, since creation or
 * its last reset). Its KV cache is full when *pos reaches info.max_ctx. Errors: PZ_ERR_INVALID_ARG
 * (NULL, or seq outside 0..max_batch-1). */
PZ_API pz_status pz_engine_position(const pz_engine *e, int seq, int64_t *pos);

/* Starts sequence `seq` (0..max_batch-1) over from an empty KV cache: its next step decodes at
 * position 0, attending to nothing before it, so a new request can take a finished one's batch
 * slot (continuous batching). The other sequences are untouched; the cache entries left behind
 * are overwritten as the new sequence grows and never read before that. Host state only: it is
 * cheap and may be called between any two steps. One rank per process: every rank calls it
 * with the same seq, between the same steps. Errors: PZ_ERR_INVALID_ARG (NULL, or seq outside
 * 0..max_batch-1). */
PZ_API pz_status pz_engine_reset_sequence(pz_engine *e, int seq);

/* Writes the rank-0 decode graph as run (after the passes): text (dot = 0) or Graphviz DOT
 * (dot = 1). Errors: PZ_ERR_INVALID_ARG for NULL or a dot other than 0 / 1, PZ_ERR_IO when
 * writing fails. */
PZ_API pz_status pz_engine_dump_graph(const pz_engine *e, FILE *f, int dot);

/* Frees everything; NULL is ignored. */
PZ_API void pz_engine_destroy(pz_engine *e);

#ifdef __cplusplus
}
#endif

/* The kernel-level API, for engines of their own (one process per GPU, their own streams,
 * buffers and CUDA graphs): the split-K GEMM, the fill gate, the decode-graph IR and passes. */
#include "prezero/gemm.h"
#include "prezero/gate.h"
#include "prezero/graph.h"
/* The multi-process communicator (fused AR + residual + RMSNorm with zero_fill), when this
 * copy of the headers has it. */
#if defined(__has_include)
#if __has_include("prezero/allreduce.h")
#include "prezero/allreduce.h"
#endif
#endif
#endif /* PREZERO_H */
