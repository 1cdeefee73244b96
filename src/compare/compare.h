/* prezero ON vs OFF on the GPU: the decode workload driver behind `prezero compare` (one
 * executor, its OFF graphs and its per-batch ON graphs over the same weights, alternated A B A B) and the result it reports. The result types
 * are plain C so that the report writer also builds without CUDA. */
#ifndef PZ_COMPARE_COMPARE_H
#define PZ_COMPARE_COMPARE_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "backend/cuda/profile.h"
#include "core/fill_rule.h"
#include "core/ir.h"
#include "core/status.h"
#ifdef __cplusplus
extern "C" {
#endif

#define PZ_CMP_MAX_CONC 16
#define PZ_CMP_MAX_ROUNDS 16

/* Per-layer kernel-time components (µs per layer, from CUPTI records of CUDA-graph replays).
 * QKV_A also counts q_proj / kv_a_proj (layouts without q LoRA). SH_GU: the shared experts'
 * gate | up GEMM inside a quantised MoE op (with its zeroing memset; MoE layers only, and only
 * where the shared experts run as GEMMs). GEMM = the sum of the consumer components QKV_A ..
 * SH_GU. DONOR = both AR + residual + RMSNorm kernels of a layer (input_layernorm and
 * post_attention_layernorm): its ON - OFF difference is the fill cost. */
typedef enum pz_cmp_comp {
  PZ_CMP_QKV_A = 0,
  PZ_CMP_Q_B,
  PZ_CMP_GATE,
  PZ_CMP_O_PROJ,
  PZ_CMP_SH_GU,
  PZ_CMP_GEMM,
  PZ_CMP_DONOR,
  PZ_CMP_N_COMP
} pz_cmp_comp;
#define PZ_CMP_LAST_CONSUMER PZ_CMP_SH_GU /* consumers are QKV_A .. this */

/* Short names used in JSON and tables: "qkv_a", "q_b", "gate", "o_proj", "sh_gu",
 * "gemm_subtotal", "donor". */
static inline const char *pz_cmp_comp_name(pz_cmp_comp c) {
  static const char *const names[PZ_CMP_N_COMP] = {"qkv_a", "q_b", "gate", "o_proj", "sh_gu", "gemm_subtotal", "donor"};
  return (unsigned)c < PZ_CMP_N_COMP ? names[c] : "?";
}

/* Whether prezero took effect for a consumer at a batch size. */
typedef enum pz_cmp_fired {
  PZ_CMP_NA = -1,        /* the component does not exist in this model / was not measured */
  PZ_CMP_NOT_FIRED = 0,  /* "n/f": the tuner's kernel is not split-K, or the gate said no */
  PZ_CMP_FIRED = 1
} pz_cmp_fired;

/* Baselines of `--baseline`: the OFF graph with every GEMM forced to one zeroing strategy
 * (gemm.h flavours), timed per component beside prezero ON. TUNED is OFF itself (AUTO). */
typedef enum pz_cmp_base {
  PZ_CMP_BASE_TUNED = 0, /* AUTO: the tuner's / heuristic's choice (= OFF) */
  PZ_CMP_BASE_INKERNEL,  /* split-K, split 0 zeroes the tile in-kernel and signals the others */
  PZ_CMP_BASE_MEMSET,    /* split-K after a memset node */
  PZ_CMP_BASE_SERIAL,    /* split-K with an ordered (deterministic) reduction */
  PZ_CMP_BASE_FULLK,     /* no split: nothing to zero */
  PZ_CMP_BASE_CUBLAS,    /* cuBLAS (beta = 0) */
  PZ_CMP_N_BASE
} pz_cmp_base;
/* The baseline's name as `--baseline` spells it ("tuned", "inkernel", ...); "?" outside 0..PZ_CMP_N_BASE-1. */
static inline const char *pz_cmp_base_name(int b) {
  static const char *const names[PZ_CMP_N_BASE] = {"tuned", "inkernel", "memset", "serial", "fullk", "cublas"};
  return b >= 0 && b < PZ_CMP_N_BASE ? names[b] : "?";
}

/* One concurrency. Timing values are medians over the rounds; *_rounds keep every round. */
typedef struct pz_cmp_point {
  int conc;                       /* requests decoded together (= batch) */
  int batch;                      /* captured batch size the steps ran at (>= conc) */
  double tput_on, tput_off;       /* output tokens/s per GPU: conc*osl / decode seconds / tp */
  double tpot_on_ms, tpot_off_ms; /* decode seconds / osl, in ms */
  double e2e_on_s, e2e_off_s;     /* per request: the osl decode steps, in s (no prefill) */
  int rounds;
  double tpot_on_rounds_ms[PZ_CMP_MAX_ROUNDS], tpot_off_rounds_ms[PZ_CMP_MAX_ROUNDS];
  /* kernel time per layer (µs), each component averaged over the layers that have it;
   * < 0 when not measured */
  bool profiled;
  double comp_on_us[PZ_CMP_N_COMP], comp_off_us[PZ_CMP_N_COMP];
  int fired[PZ_CMP_N_COMP];       /* pz_cmp_fired for QKV_A..SH_GU; NA for the others */
  /* per-layer µs of each component under each baseline of opts.baselines (< 0: not measured);
   * [TUNED] repeats comp_off_us */
  double base_us[PZ_CMP_N_BASE][PZ_CMP_N_COMP];
  /* whole-layer kernel time (every kernel of the layer, µs, CUPTI), OFF / ON, by layer kind;
   * -1 when no layer of that kind ran; for the TPOT projection of the whole model */
  double dense_layer_us[2], moe_layer_us[2];
  int n_dense_run, n_moe_run;     /* layers of each kind this run decoded */
  bool kernels_changed[PZ_CMP_N_COMP]; /* ON ran other graph nodes / kernels than OFF there */
  /* bit-identity */
  bool tokens_identical;          /* every generated token of every round, ON vs OFF */
  bool logits_identical;          /* final step's logits [conc, vocab], ON vs OFF, bit for bit */
  double logits_max_abs_diff;     /* max |ON - OFF| over the final logits */
  double logits_off_spread;       /* max |OFF round 1 - OFF round 2| (the OFF path's own spread;
                                     -1 with one round) */
  int64_t first_token_mismatch;   /* step*conc + row of the first differing token, -1 if none */
} pz_cmp_point;

typedef struct pz_cmp_result {
  char model[64];
  char device[128];               /* GPU name of rank 0 */
  int tp, layers, layers_total;   /* layers run / the model's num_hidden_layers */
  unsigned baselines;             /* opts.baselines that were measured */
  int dense_total, moe_total;     /* the model's dense / MoE layers (num_hidden_layers split) */
  bool layers_auto;               /* layers chosen from free memory (no --layers) */
  int isl, osl, rounds;
  int isl_max;                    /* > isl: per-request prompt lengths drawn from [isl, isl_max] (pz_cmp_isl_of); 0: all isl */
  uint64_t seed;
  char determinism[256];          /* the settings in effect (PREZERO_GEMM_FORCE/SPLITS, gate) */
  int n_points;
  pz_cmp_point points[PZ_CMP_MAX_CONC];
  char experts[64];               /* routed experts' storage as the graph holds them: "bf16",
                                     "int4 W4A16 group 32", "fp8 W8A16 block 128x128" */
  double moe_layer_bytes;         /* per-GPU bytes of one MoE layer (weights, KV cache, prezero
                                     buffers; the memory plan's count), 0 when unknown */
  double fixed_bytes;             /* per-GPU bytes outside the layers (the plan's cum[0]) */
  double budget_bytes;            /* per-GPU bytes usable beside the reserve */
  char notes[1024];               /* what the run said about itself (layers chosen, dropped records) */
  char command[512];              /* the command line that made it (set by the CLI) */
  char date[32];                  /* UTC, ISO 8601, when it finished (set by the CLI) */
} pz_cmp_result;

/* Options of pz_compare_run. */
struct pz_ar_comm;
typedef struct pz_cmp_opts {
  const char *model;      /* preset or config.json (default "kimi_k2") */
  const char *model_dir;  /* NULL, or a Hugging Face checkpoint directory (pz_engine_config.model_dir):
                             config and weights of both engines from it (`model` is ignored) */
  int tp;                 /* GPUs (ranks 0..tp-1 on devices 0..tp-1) */
  int layers;             /* 0: as many as fit in free memory (weights once, both graph sets over them) */
  int quant;              /* routed experts' synthetic storage (prezero.h PZ_QUANT_*): PZ_QUANT_AUTO (0)
                             as the config says (kimi_k25: INT4), or BF16 / INT4 / FP8 (`--quant`; not
                             with model_dir). The layer count that fits follows the stored bytes. */
  int isl, osl;           /* prompt KV tokens per request (seeded random cache), decode steps */
  int isl_max;            /* > isl: request i's prompt is pz_cmp_isl_of(seed, isl, isl_max, i) tokens, a
                             seeded uniform draw from [isl, isl_max] (`--isl A:B`); 0 (or isl): every
                             request has isl */
  int n_conc;
  int conc[PZ_CMP_MAX_CONC]; /* ascending */
  int rounds;             /* A B pairs: OFF ON OFF ON ... (>= 1) */
  uint64_t seed;
  bool profile;           /* collect CUPTI kernel records (per-component times) */
  unsigned baselines;     /* bit (1 << pz_cmp_base) per baseline to profile beside ON (needs profile) */
  int profile_iters;      /* graph replays per (concurrency, engine) under CUPTI */
  /* progress: called with a one-line status (no newline) now and then; may be NULL */
  void (*progress)(void *user, const char *line);
  void *user;
  FILE *log;              /* plan / notes lines (may be NULL) */
  struct pz_ar_comm *ar_comm; /* NULL: every rank in this process. Else this process runs only the
                             communicator's rank of the TP group (world = tp; cuda/exec.h,
                             pz_cuda_exec_opts.ar_comm) and pz_compare_run is collective: every rank
                             calls it with the same options; the layer count is the fewest any rank
                             fits; each rank's result holds its own timings (rank 0 reports) */
} pz_cmp_opts;
#define PZ_CMP_OPTS_INIT {.model = "kimi_k2", .tp = 1, .layers = 0, .isl = 8192, .osl = 1024, .n_conc = 6, \
                          .conc = {4, 8, 16, 32, 64, 128}, .rounds = 2, .seed = 1234, .profile = true,    \
                          .profile_iters = 20, .progress = NULL, .user = NULL, .log = NULL}

/* Prompt length (KV tokens already cached) of request i (0-based) of a run: isl when isl_max <=
 * isl, else isl + u mod (isl_max - isl + 1), u = SplitMix64 output (core/fill_rule.h) of
 * (seed ^ 0x5eed15a1c0ffee00) + i: uniform over [isl, isl_max] (bias below 2^-40). Request i is
 * the same in every batch size (row i of a batch of conc is row i of every larger one), every
 * round and both engines, so ON and OFF decode the same mixed batch. */
static inline int pz_cmp_isl_of(uint64_t seed, int isl, int isl_max, int i) {
  if (isl_max <= isl) return isl;
  const uint64_t u = pz_fill_splitmix64((seed ^ 0x5eed15a1c0ffee00ull) + (uint64_t)i);
  return isl + (int)(u % (uint64_t)(isl_max - isl + 1));
}
/* The largest prompt of a run: isl_max when it exceeds isl, else isl. */
static inline int pz_cmp_isl_cap(int isl, int isl_max) { return isl_max > isl ? isl_max : isl; }

/* Runs the workload (CUDA builds only; the symbol is absent without CUDA):
 *   0. with o->quant, stores the routed experts of the seeded weights that way (the CUDA
 *      executor fills them on the GPU, the bits of model/quant_synth.h);
 *   1. builds the OFF decode graph for max batch = the largest conc and a KV capacity of
 *      max(isl, isl_max) + osl; picks layers when 0 (largest N whose executor fits every GPU's free memory
 *      minus the reserve), else checks that N fits (PZ_ERR_OOM otherwise);
 *   2. creates one CUDA backend (backend/backend.h) in per-batch prezero mode (cuda/exec.h: the
 *      ON graph of each batch size is the prezero pass's plan for it, the OFF graph where nothing
 *      fires; with model_dir the weights come from the checkpoint, the KV cache stays seeded),
 *      and captures an OFF and an ON CUDA graph per concurrency (CUPTI attribution on when profiling); `fired` comes from
 *      the backend's plan (pz_backend_plan);
 *   3. per concurrency, `rounds` times OFF then ON: osl greedy steps of conc requests, request i
 *      from position pz_cmp_isl_of(seed, isl, isl_max, i) (seeded random first tokens; each round
 *      restarts there), timed on the host
 *      clock around the steps (each step ends with every rank done and the argmax combined);
 *   4. compares the tokens of every step and the final step's logits, ON vs OFF;
 *   5. when profiling, replays each engine's graph profile_iters times under CUPTI and sums the
 *      per-graph-node median durations (rank 0) into the components (every row at one position:
 *      isl, or with a distribution the mean of the batch's drawn lengths, which r->notes says).
 * Without CUPTI (another profiler attached) the run goes on without components, saying so in
 * r->notes. On an error after some concurrencies completed, r keeps those (r->n_points) and the
 * note names where it stopped; the error is returned all the same.
 * Errors: PZ_ERR_INVALID_ARG, PZ_ERR_NO_DEVICE (fewer than tp GPUs), PZ_ERR_OOM (the layers do
 * not fit), PZ_ERR_UNSUPPORTED (an op without CUDA kernel, or shapes beyond a kernel's limits),
 * PZ_ERR_CUDA, those of pz_checkpoint_open / pz_checkpoint_plan with model_dir, and those of the
 * model builder and the executor. */
pz_status pz_compare_run(const pz_cmp_opts *o, pz_cmp_result *r);

/* One engine of pz_compare_decode: a decode step of m rows (tokens, positions -> next tokens,
 * as pz_backend_step) and the last step's logits [m, vocab] f32. */
typedef struct pz_cmp_engine_ops {
  pz_status (*step)(void *engine, int m, const int32_t *tokens, const int32_t *pos, int32_t *next);
  pz_status (*logits)(void *engine, int m, float *out);
} pz_cmp_engine_ops;

/* The timed part of one concurrency o->conc[ci] (backend-neutral; pz_compare_run passes its
 * CUDA backend, seen as an OFF and an ON engine): o->rounds times, engine[0] (OFF) then engine[1] (ON), each decodes o->osl
 * greedy steps of conc rows, row i from position pz_cmp_isl_of(o->seed, o->isl, o->isl_max, i),
 * starting from first[conc]; wall time on the
 * host clock around the steps. Fills pt's timing (medians over rounds, every round kept),
 * tokens_identical / first_token_mismatch (every step of every round, OFF vs ON), the final
 * step's logits comparison (last round, OFF vs ON) and logits_off_spread (OFF first vs last
 * round; -1 with one round). Errors: PZ_ERR_OOM, the engines' errors. */
pz_status pz_compare_decode(const pz_cmp_opts *o, int ci, const pz_cmp_engine_ops *ops, void *engine[2], int64_t vocab,
                            const int32_t *first, pz_cmp_point *pt);

/* Kernel time of one engine at one batch size, per component (µs per layer; -1 when the graph
 * has none of it); sig / nodes: a hash of the graph nodes' kinds and names, and their count,
 * per component (ON and OFF differ there when prezero changed what runs). */
typedef struct pz_cmp_components {
  double us[PZ_CMP_N_COMP];
  uint64_t sig[PZ_CMP_N_COMP];
  int nodes[PZ_CMP_N_COMP];
  /* every kernel of a layer, summed: mean over the layers with an MOE node (moe) and over the
   * others (dense), µs; -1 when no such layer ran. n_*: layers of each kind that ran. */
  double dense_layer_us, moe_layer_us;
  int n_dense, n_moe;
} pz_cmp_components;

/* Sums profiled graph nodes v[nv] (pz_profile_summary order: device, tag, seq) of one device
 * into per-layer components of the decode graph g whose node ids the tags are:
 *   - a node tagged with a GEMM IR node of role qkv_a (or q_proj / kv_a_proj; GQA: qkv_proj) or
 *     mlp.gate (GQA dense layers: mlp.gate_up_proj) counts for that component (QKV_A, GATE), its
 *     memset / zeroing nodes included;
 *   - a node tagged with an AR_RMSNORM(_MAYBE_PREZERO) IR node counts as DONOR;
 *   - inside an MLA_ATTN IR node, in creation order (prep kernel, q_b GEMM, absorb, attention,
 *     combine, W_UV, o_proj GEMM; MLA kernels are those whose name contains "mla_"), the other
 *     nodes between the first and the second MLA kernel are q_b (q LoRA layouts only) and those
 *     after the last MLA kernel are o_proj; inside a GQA_ATTN IR node (kernels whose name
 *     contains "gqa_"), the nodes after the last GQA kernel are o_proj;
 *   - nodes of IR nodes outside the layers, and of other ops, are not counted; nodes without a
 *     tag (or a tag that is no node of g) are counted in *unattributed.
 * Each component's time is its per-layer sum (of median_us) averaged over the layers that have
 * nodes of it; GEMM = the sum of the four GEMM components. Pure host code. */
void pz_compare_attribute(const pz_graph *g, const pz_profile_node *v, int nv, int device, pz_cmp_components *out,
                          int *unattributed);

#ifdef __cplusplus
}
#endif
#endif
