/* The prezero CLI (path from $PZ_CLI, set by tests/CMakeLists.txt): every bad input gives a
 * non-zero exit and exactly one stderr line "prezero <cmd>: <what>; <fix>"; run, graph, --dot
 * and --help work. Decoding runs pass --device cpu (on a GPU machine run defaults to cuda). */
#include <stdarg.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "pz_test.h"
#include "pz_cli_test.h"
#include "prezero.h"

static const char *cli;
static char dir[] = "/tmp/pz_test_cli_XXXXXX";
static char out_txt[1 << 20], err_txt[1 << 16];

/* Runs the CLI with `args` (shell words); see pz_cli_run. */
static int run(const char *args) {
  return pz_cli_run(cli, dir, args, out_txt, sizeof out_txt, err_txt, sizeof err_txt);
}

static void write_file(const char *name, const char *text) {
  char p[300];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (!f) { perror(p); exit(1); }
  fputs(text, f);
  fclose(f);
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* Expects a failure of `cmd` ("run" or "graph") with one stderr line naming `needle`. */
static int last_rc; /* exit code of the last bad() */
static void bad(const char *cmd, const char *args, const char *needle) {
  char full[1024], prefix[64];
  snprintf(full, sizeof full, "%s %s", cmd, args);
  snprintf(prefix, sizeof prefix, "prezero %s: ", cmd);
  int rc = last_rc = run(full);
  size_t n = strlen(err_txt);
  int ok = rc != 0 && n > 0 && err_txt[n - 1] == '\n' && count(err_txt, "\n") == 1 &&
           !strncmp(err_txt, prefix, strlen(prefix)) && strstr(err_txt, needle) && strstr(err_txt, "; ") &&
           !strstr(out_txt, "step 1:");
  if (!ok) {
    fprintf(stderr, "FAIL: prezero %s -> exit %d, stderr: [%s] (want one line with '%s')\n", full, rc, err_txt, needle);
    pz_test_failures++;
  }
}

static const char *cfg_lines =
    "  \"hidden_size\": 512, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, \"q_lora_rank\": 128,\n"
    "  \"qk_nope_head_dim\": 32, \"qk_rope_head_dim\": 32, \"v_head_dim\": 64, \"n_routed_experts\": 64,\n"
    "  \"num_experts_per_tok\": 6, \"moe_intermediate_size\": 128, \"intermediate_size\": 1024,\n"
    "  \"vocab_size\": 1024, \"max_position_embeddings\": 4096";

int main(void) {
  cli = getenv("PZ_CLI");
  if (!cli || !*cli) { fprintf(stderr, "PZ_CLI is not set (run through ctest); skipping\n"); return 77; }
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  unsetenv("PREZERO_ENABLE");
  char text[4096], args[512];

  /* Config files: good (kv_lora_rank given), malformed, truncated, missing field, wrong type. */
  snprintf(text, sizeof text, "{\n%s,\n  \"kv_lora_rank\": 96\n}\n", cfg_lines);
  write_file("good.json", text);
  write_file("malformed.json", "{\"hidden_size\": 512 \"num_hidden_layers\": 2}");
  snprintf(text, sizeof text, "{\n%s,\n  \"kv_lora_rank\": 9", cfg_lines);
  write_file("truncated.json", text);
  snprintf(text, sizeof text, "{\n%s\n}\n", cfg_lines);
  write_file("missing.json", text);
  snprintf(text, sizeof text, "{\n%s,\n  \"kv_lora_rank\": \"96\"\n}\n", cfg_lines);
  write_file("wrongtype.json", text);

  /* Success: a config.json path decodes. */
  snprintf(args, sizeof args, "run --config %s/good.json --steps 2 --context 16 --batch 2 --device cpu", dir);
  CHECK(run(args) == 0 && strstr(out_txt, "step 2:") && err_txt[0] == 0);

  /* Bad input, run. */
  snprintf(args, sizeof args, "--config %s/malformed.json", dir);
  bad("run", args, "JSON");
  snprintf(args, sizeof args, "--config %s/truncated.json", dir);
  bad("run", args, "JSON");
  snprintf(args, sizeof args, "--config %s/missing.json", dir);
  bad("run", args, "kv_lora_rank");
  snprintf(args, sizeof args, "--config %s/wrongtype.json", dir);
  bad("run", args, "kv_lora_rank");
  snprintf(args, sizeof args, "--config %s/nonexistent.json", dir);
  bad("run", args, "nonexistent.json");
  bad("run", "--tp 3", "num_attention_heads");
  bad("run", "--config kimi_k2 --tp 3 --layers 1", "num_attention_heads");
  bad("run", "--tp 0", "--tp");
  bad("run", "--tp two", "integer");
  bad("run", "--batch 0", "--batch");
  bad("run", "--batch 257", "--batch");
  bad("run", "--context 5000", "max_position_embeddings");
  bad("run", "--context 4090 --steps 8", "max_position_embeddings");
  bad("run", "--config kimi_k3", "kimi_k2");       /* unknown preset: the message lists the presets */
  bad("run", "--config kimi_k3", "unknown model preset");
  bad("run", "--frobnicate", "unknown option");
  bad("run", "--steps", "needs a value");
  bad("run", "--steps 0", "--steps");
  bad("run", "--layers 9", "num_hidden_layers");
  bad("run", "--prezero maybe", "--prezero");
  bad("run", "--device tpu", "--device");

  /* Bad input, graph. */
  bad("graph", "--config kimi_k2 --tp 3", "num_attention_heads");
  bad("graph", "--config kimi_k3", "kimi_k2");
  snprintf(args, sizeof args, "--config %s/truncated.json", dir);
  bad("graph", args, "JSON");
  bad("graph", "--batch 0", "--batch");
  bad("graph", "--layers 99", "num_hidden_layers");
  bad("graph", "--context 5000", "max_position_embeddings");
  bad("graph", "--frobnicate", "unknown option");

  /* Lists refuse empty elements (a trailing comma was accepted by plan, refused by --prompt-ids),
   * and numbers refuse a leading '+' or space like any other leading junk (exit 0 before). */
  bad("plan", "--batch 1,", "--batch '1,'");
  bad("plan", "--batch 1,2,", "--batch '1,2,'");
  bad("plan", "--batch 1,,2", "--batch '1,,2'");
  bad("plan", "--batch +2", "--batch '+2'");
  bad("plan", "--tp +2", "--tp needs a positive integer");
  bad("soak", "--batch 1,3,", "bad value '1,3,' for --batch");
  bad("soak", "--layers +2", "bad value '+2' for --layers");
  bad("run", "--prompt-ids '1,2,3,'", "--prompt-ids '1,2,3,'");
  bad("run", "--prompt-ids '+1,2'", "--prompt-ids '+1,2'");
  bad("run", "--tp +2", "--tp needs an integer, got '+2'");
  bad("run", "--steps ' 2'", "--steps needs an integer");
  CHECK(last_rc == 2);
  /* An option given twice is refused, not the last one kept silently (any subcommand, both forms). */
  bad("run", "--config tiny --config tiny_llama", "--config given twice");
  CHECK(last_rc == 2);
  bad("run", "--config=tiny --config tiny", "--config given twice");
  bad("run", "--tp 1 --steps 2 --tp 2", "--tp given twice");
  snprintf(args, sizeof args, "--model %s --model %s", dir, dir);
  bad("run", args, "--model given twice");
  bad("graph", "--layers 1 --layers 2", "--layers given twice");
  bad("plan", "--batch 1 --batch 2", "--batch given twice");
  /* --batch / --context out of range are refused even where --prompt-ids overrides them. */
  bad("run", "--prompt-ids 1,2 --batch 0", "--batch 0 is out of range");
  CHECK(last_rc == 2);
  bad("run", "--prompt-ids 1,2 --context -1", "--context -1 is negative");
  /* Refused after --prompt-ids was parsed: nothing of it is left allocated (tools/asan-tests.sh). */
  bad("run", "--prompt-ids 1,2 --steps 0", "--steps 0 is out of range");
  bad("run", "--prompt-ids 1,2 --tp 0", "--tp 0 is out of range");
  bad("run", "--prompt-ids 1,2 --layers 0", "--layers 0 is out of range");
  bad("run", "--prompt-ids 1,2 --context 99999999999", "--context 99999999999 is out of range for tiny");
  CHECK(last_rc == 2);
  CHECK(run("run --prompt-ids 1,2 --context 5 --steps 2 --device cpu") == 0 && strstr(out_txt, "seq 0:"));
  /* An empty --config or --model is refused in every subcommand, exit 2 as in run and graph (plan,
   * compare, soak and bench step ran tiny; run and compare --model "" exited 1 with "checkpoint :"). */
  bad("plan", "--config ''", "--config is empty; use a preset (");
  CHECK(last_rc == 2 && !out_txt[0]);
  bad("plan", "--config=", "--config is empty");
  bad("compare", "--config ''", "--config is empty; use a preset (");
  CHECK(last_rc == 2);
  bad("soak", "--config ''", "--config is empty; use a preset (");
  CHECK(last_rc == 2);
  bad("run", "--model ''", "--model is empty; give it the path of a Hugging Face checkpoint directory");
  CHECK(last_rc == 2);
  bad("compare", "--model=", "--model is empty");
  CHECK(last_rc == 2);
#ifdef PZ_HAVE_CUDA
  bad("bench step", "--config ''", "--config is empty");
  CHECK(last_rc == 2);
#endif
  /* Extra words after --version / --help are refused (they were ignored). */
  CHECK(run("--version extra") == 2 && count(err_txt, "\n") == 1 && strstr(err_txt, "prezero: unexpected argument 'extra'") &&
        strstr(err_txt, "; ") && !out_txt[0]);
  CHECK(run("--help extra") == 2 && strstr(err_txt, "unexpected argument 'extra'") && !out_txt[0]);
  /* An argument that is not printable UTF-8 text is refused before any message could quote it:
   * an invalid byte (0xff, argument 2 at offset 5), a lone continuation byte, a newline, an escape. */
  CHECK(run("run --bad\"$(printf '\\377')\"") == 2 && count(err_txt, "\n") == 1 &&
        strstr(err_txt, "prezero: argument 2 has byte 0xff at offset 5") && strstr(err_txt, "; ") && !out_txt[0]);
  CHECK(run("graph --config \"$(printf 'a\\200b')\"") == 2 && count(err_txt, "\n") == 1 &&
        strstr(err_txt, "argument 3 has byte 0x80 at offset 1"));
  CHECK(run("run --config \"$(printf 'x\\ny')\"") == 2 && count(err_txt, "\n") == 1 &&
        strstr(err_txt, "argument 3 has byte 0x0a at offset 1"));
  CHECK(run("\"$(printf '\\033[2J')\"") == 2 && count(err_txt, "\n") == 1 &&
        strstr(err_txt, "argument 1 has byte 0x1b at offset 0"));
  /* Non-ASCII UTF-8 passes the check (and is then an unknown option, quoted as given). */
  bad("run", "--b\303\251", "unknown option '--b\303\251'");
  bad("graph", "--help extra", "unexpected argument 'extra'");
  CHECK(last_rc == 2 && !out_txt[0]);
  bad("run", "--tp 2 -h extra", "unexpected argument 'extra'");
  CHECK(run("graph --tp 2 --help") == 0 && strstr(out_txt, "usage: prezero graph"));
  /* "prezero help CMD" is CMD's help; "help CMD extra" is refused */
  CHECK(run("help graph") == 0 && strstr(out_txt, "usage: prezero graph"));
  CHECK(run("help graph extra") == 2 && strstr(err_txt, "unexpected argument") && !out_txt[0]);
  /* An empty --logits path: its own message (it said "cannot write --logits  (No such file ...)"). */
  bad("run", "--logits ''", "--logits is empty");
  CHECK(last_rc == 2 && !strstr(err_txt, "  "));

  /* run: step lines with one token per sequence, then the timing line. */
  CHECK(run("run --tp 2 --steps 3 --device cpu") == 0);
  CHECK(count(out_txt, "\nstep ") == 3 && strstr(out_txt, "timing: 3 steps") && err_txt[0] == 0);
  const char *s1 = strstr(out_txt, "step 1:");
  if (s1) {
    int a, b, c, d, e = -1;
    int n = sscanf(s1, "step 1: %d %d %d %d\nstep 2: %d", &a, &b, &c, &d, &e);
    CHECK(n == 5 && a >= 0 && a < 1024 && d >= 0 && d < 1024);
  }
  /* --quant on a model without routed experts: it runs, and a note says the flag changed nothing; a MoE
     preset gets no such note. */
  CHECK(run("run --config tiny_llama --quant int4 --steps 1 --device cpu") == 0 &&
        strstr(out_txt, "# note: --quant int4 has no effect: tiny_llama has no routed experts"));
  CHECK(run("run --quant int4 --steps 1 --device cpu") == 0 && !strstr(out_txt, "has no effect"));
  /* No arguments at all: decodes the embedded default. */
  CHECK(run("") == 0 && strstr(out_txt, "# tiny:") && strstr(out_txt, "step 1:"));
  /* The same seed gives the same tokens at TP 1 and TP 2 (2 steps). */
  CHECK(run("run --tp 1 --steps 2 --seed 5 --device cpu") == 0);
  char tp1[4096];
  snprintf(tp1, sizeof tp1, "%s", strstr(out_txt, "prompt:") ? strstr(out_txt, "prompt:") : "");
  if (strstr(tp1, "timing:")) *strstr(tp1, "timing:") = 0;
  CHECK(strstr(tp1, "step 2:") != NULL);
  CHECK(run("run --tp 2 --steps 2 --seed 5 --device cpu") == 0 && strstr(out_txt, tp1));

  /* graph: the figures of the issue for Kimi-K2 at TP 4, 2 layers. */
  snprintf(args, sizeof args, "graph --config kimi_k2 --tp 4 --layers 2 --dot %s/g.dot", dir);
  CHECK(run(args) == 0);
  CHECK(strstr(out_txt, "layers.0.input_layernorm") && strstr(out_txt, "layers.1.post_attention_layernorm"));
  CHECK(strstr(out_txt, "layers.1.self_attn.qkv_a.out[4,2112]f32"));
  CHECK(strstr(out_txt, "layers.1.input_layernorm.out[4,7168]bf16"));
  CHECK(count(out_txt, "q_b=1536->3072 o_proj=2048->7168") == 2);
  CHECK(strstr(out_txt, "layers.1.mlp.gate.weight[384,7168]bf16") && !strstr(out_txt, "layers.0.mlp.gate ") &&
        !strstr(out_txt, "layers.0.mlp.gate."));
  CHECK(count(out_txt, " ar_rmsnorm ") == 5); /* 2 per layer + final norm */
  char dot[1 << 16], p[300];
  snprintf(p, sizeof p, "%s/g.dot", dir);
  slurp(p, dot, sizeof dot);
  CHECK(!strncmp(dot, "digraph", 7) && strstr(dot, "layers.1.mlp.gate"));
  CHECK(run("graph --config deepseek_v2_lite --tp 2 --layers 2") == 0 && strstr(out_txt, "layers.1.self_attn.q_proj") &&
        !strstr(out_txt, "qkv_a"));

  /* bench step --seed reads like run --seed (decimal, or hex with 0x); it is checked before any
   * GPU is looked for. A build without CUDA does not parse bench options. */
#ifdef PZ_HAVE_CUDA
  bad("bench step", "--seed 0x", "--seed");
  /* bench gemm: counts and the diagnostics pin are checked before any GPU is looked for */
  bad("bench gemm", "--reps x", "--reps 'x'");
  bad("bench gemm", "--pool-mb 0", "--pool-mb '0'");
  bad("bench gemm", "--pool-mb 100", "--pool-mb '100'"); /* below the pool's 256 MB: refused, not raised */
  bad("bench gemm", "--reps 2", "--reps '2'");
  setenv("PREZERO_BENCH_CFG", "yes", 1);
  bad("bench gemm", "--m 1", "PREZERO_BENCH_CFG=yes");
  setenv("PREZERO_BENCH_CFG", "2,1,5", 1);
  bad("bench gemm", "--m 1", "PREZERO_BENCH_CFG=2,1,5");
  unsetenv("PREZERO_BENCH_CFG");
  bad("bench step", "--seed -1", "--seed");
  bad("bench step", "--seed 1e3", "--seed");
  bad("bench step", "--rows 0", "--rows");                          /* real rows: at least 1 */
  bad("bench step", "--batch 8,32 --rows 17", "--rows 17 exceeds batch 8"); /* and at most every batch */
  /* bench ar / bench attn read numbers like every other subcommand: trailing junk, an empty value
   * and overflow are refused before any GPU is looked for (atoi took "2x" as 2, and
   * 99999999999999999999 as -1, reported as "got -1"); --reps of bench attn is 3..1000 as in bench
   * gemm (it raised 1 to 3 silently). */
  bad("bench ar", "--tp 2x", "--tp needs an integer, got '2x'");
  CHECK(last_rc == 2);
  bad("bench ar", "--iters 99999999999999999999", "--iters 99999999999999999999 is beyond a 64-bit integer");
  bad("bench ar", "--reps ''", "--reps needs an integer, got ''");
  bad("bench ar", "--tp 9", "--tp 9 is out of range; use --tp 1..8");
  bad("bench ar", "--tp", "--tp needs a value"); /* it said "unknown option '--tp'" */
  CHECK(last_rc == 2);
  /* --one-gpu alone: what it goes with, not "unknown option" (--help lists it) */
  bad("bench ar", "--one-gpu", "--one-gpu places the ranks of one process per rank; add --procs N");
  CHECK(last_rc == 2);
  bad("bench attn", "--ctx 64x", "--ctx needs an integer, got '64x'");
  bad("bench attn", "--ctx-min abc", "--ctx-min needs an integer, got 'abc'");
  bad("bench attn", "--reps -3", "--reps -3 is out of range; use --reps 3..1000");
  bad("bench attn", "--layout gqa --reps 5x", "--reps needs an integer, got '5x'");
  bad("bench attn", "--layout gqa --ctx 99999999999999999999", "--ctx 99999999999999999999 is beyond a 64-bit integer");
  CHECK(last_rc == 2);
  /* Without a GPU, one process per rank is refused with the fix, not the runtime's "CUDA driver
   * version is insufficient for CUDA runtime version". */
  if (pz_gpu_count() == 0) {
    bad("bench ar", "--procs 2", "no CUDA GPU is visible; run it on a machine with a CUDA GPU");
    CHECK(last_rc == 1);
  }
  if (pz_gpu_count() == 0) /* 08 is accepted (base 0 read it as 0): the refusal is for the GPU */
    CHECK(run("bench step --config tiny --context 16 --seed 08") == 1 && !strstr(err_txt, "--seed") && strstr(err_txt, "GPU"));
#endif

  /* The same error exits the same way in every subcommand: 2 for a wrong command line (values out
   * of range, also against the model), 1 for files (run --batch 0 exited 1, graph --batch 0 2). */
  static const struct { const char *cmd, *args, *needle; int rc; } same[] = {
      {"run", "--batch 0", "use --batch 1..256", 2},           {"graph", "--batch 0", "use --batch 1..256", 2},
      {"run", "--tp 3", "num_attention_heads", 2},              {"graph", "--tp 3", "num_attention_heads", 2},
      {"compare", "--config tiny --tp 3", "num_attention_heads", 2},
      {"run", "--layers 9", "num_hidden_layers", 2},            {"graph", "--layers 9", "num_hidden_layers", 2},
      {"compare", "--config tiny --layers 9", "num_hidden_layers", 2},
      {"run", "--context 5000", "max_position_embeddings", 2},  {"graph", "--context 5000", "max_position_embeddings", 2},
      {"run", "--frobnicate", "unknown option", 2},             {"graph", "--frobnicate", "unknown option", 2},
      {"compare", "--frobnicate", "unknown option", 2},
      {"run", "--config kimi_k3", "unknown model preset", 1},   {"graph", "--config kimi_k3", "unknown model preset", 1},
  };
  for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
    bad(same[i].cmd, same[i].args, same[i].needle);
    if (last_rc != same[i].rc) {
      fprintf(stderr, "FAIL: prezero %s %s exited %d, want %d\n", same[i].cmd, same[i].args, last_rc, same[i].rc);
      pz_test_failures++;
    }
  }
  /* graph --context 0 gives the model's range (it suggested 1..1099511627776). */
  bad("graph", "--context 0", "--context 0 is out of range; use --context 1..4096 (max_position_embeddings of tiny)");
  CHECK(last_rc == 2 && !strstr(err_txt, "1099511627776"));
  /* -1 (the "not given" value inside) is refused like any other (it printed the graph, exit 0). */
  bad("graph", "--context -1", "--context -1 is out of range; use --context 1..4096 (max_position_embeddings of tiny)");
  CHECK(last_rc == 2 && out_txt[0] == 0);
  bad("run", "--context -1", "--context");
  CHECK(last_rc == 2);

  /* --flag=value reads as --flag value (it was "unknown option '--tp=2'"). */
  CHECK(run("run --tp 2 --steps 2 --seed 7 --device cpu") == 0);
  char spaced[4096];
  snprintf(spaced, sizeof spaced, "%s", strstr(out_txt, "prompt:") ? strstr(out_txt, "prompt:") : "");
  if (strstr(spaced, "timing:")) *strstr(spaced, "timing:") = 0;
  CHECK(strstr(spaced, "step 2:") != NULL);
  CHECK(run("run --tp=2 --steps=2 --seed=7 --device=cpu --config=tiny") == 0 && strstr(out_txt, spaced) &&
        strstr(out_txt, "tp 2,") && err_txt[0] == 0);
  CHECK(run("graph --config=tiny --layers=1 --prezero=on") == 0 && strstr(out_txt, "# prezero on") &&
        !strstr(out_txt, "layers.1."));
  bad("run", "--tp=0", "--tp 0 is out of range");
  bad("run", "--help=yes", "--help takes no value");
  CHECK(last_rc == 2);

  /* --version and the one-line description at the top of --help. */
  CHECK(run("--version") == 0 && !strncmp(out_txt, "prezero " PZ_VERSION " (", strlen("prezero " PZ_VERSION " (")) &&
        count(out_txt, "\n") == 1 && err_txt[0] == 0);
#ifdef PZ_HAVE_CUDA
  CHECK(strstr(out_txt, "CUDA backend built") != NULL);
#else
  CHECK(strstr(out_txt, "built without CUDA") != NULL);
#endif
  CHECK(run("--help") == 0 && !strncmp(out_txt, "prezero: decodes LLMs (DeepSeek-V2", 34) &&
        strstr(out_txt, "\nusage: prezero <command>") && strstr(out_txt, "--version"));

  /* --help. */
  CHECK(run("run --help") == 0 && strstr(out_txt, "usage: prezero run") && strstr(out_txt, "--context"));
  CHECK(run("graph --help") == 0 && strstr(out_txt, "usage: prezero graph") && strstr(out_txt, "--dot"));
  /* prezero plan: every donor and consumer per batch size, on any build (no GPU: an H200 model
   * on CUDA builds, every legal consumer counted as firing without CUDA); one-line errors. */
  CHECK(run("plan --help") == 0 && strstr(out_txt, "usage: prezero plan"));
  CHECK(run("plan --config kimi_k2 --batch 4,64 --layers 2") == 0 && strstr(out_txt, "## batch 4") &&
        strstr(out_txt, "## batch 64") && strstr(out_txt, "donor layers.1.post_attention_layernorm") &&
        strstr(out_txt, "total at m=64:") && strstr(out_txt, "layers.0.self_attn.qkv_a"));
  bad("plan", "--batch 8,4", "not an ascending list");
  bad("plan", "--frob 1", "unknown option '--frob'");
  bad("plan", "--layers x", "--layers needs a positive integer");
  bad("plan", "--tp 128", "TP degree 128 is out of range 1..64; use --tp 1..64");
  CHECK(last_rc == 2);
  write_file("empty_obj.json", "{}"); /* its "; " sat inside the parentheses: no fix was added */
  snprintf(args, sizeof args, "--config %s/empty_obj.json", dir);
  bad("graph", args, "\"q_lora_rank\" are missing (the MLA ranks, q_lora_rank null for V2-Lite); fix the config.json");
  /* prezero plan prints the memory plan on CUDA builds: INT4 experts (kimi_k25) are stored packed,
   * so one MoE layer holds 384 x 3 x 2048 x 7168 x (1/2 + 2/32) bytes = 8.86 GiB of experts (bf16
   * kimi_k2: 31.50 GiB) plus attention, router, shared expert and KV cache (< 1 GiB here), and more
   * layers fit. */
#ifdef PZ_HAVE_CUDA
  {
    double gib[2] = {0, 0};
    int fit[2] = {0, 0};
    static const char *const cfgs[2] = {"kimi_k25", "kimi_k2"};
    for (int k = 0; k < 2; k++) {
      snprintf(args, sizeof args, "plan --config %s --batch 4", cfgs[k]);
      CHECK(run(args) == 0);
      const char *ln = strstr(out_txt, "# memory per GPU");
      CHECK(ln != NULL);
      if (!ln) continue;
      const char *pm = strstr(ln, "GiB outside the layers, ");
      const char *pf = strstr(ln, "; ");
      if (pm) gib[k] = atof(pm + strlen("GiB outside the layers, "));
      if (pf) fit[k] = atoi(pf + 2);
      CHECK(strstr(ln, k == 0 ? "(routed experts int4 W4A16 group 32)" : "(routed experts bf16)") != NULL);
      CHECK(strstr(ln, " of 61 layers fit in ") != NULL);
    }
    const double e4 = 384.0 * 3 * 2048 * 7168 * (0.5 + 2.0 / 32) / 1073741824.0, e16 = 384.0 * 3 * 2048 * 7168 * 2 / 1073741824.0;
    CHECK(gib[0] >= e4 && gib[0] < e4 + 1.0);
    CHECK(gib[1] >= e16 && gib[1] < e16 + 1.0);
    CHECK(fit[0] > fit[1] && fit[1] >= 1);
  }
#endif
  /* --quant of bench moe and compare: a storage name, else one line and exit 2 (every build: parsed
   * before any GPU is looked for); compare refuses it with --model. */
  bad("bench moe", "--quant int3", "--quant 'int3' is not a storage; use --quant bf16, int4 or fp8");
  CHECK(last_rc == 2);
  bad("bench moe", "--quant", "--quant needs a value");
  CHECK(last_rc == 2);
  bad("bench moe", "--m 0", "--m '0' is not a list of batch sizes");
  CHECK(last_rc == 2);
  bad("bench moe", "--tp 3", "TP 3 does not split moe_intermediate 2048");
  CHECK(last_rc == 2);
  bad("bench moe", "--frob", "unknown option '--frob'");
  CHECK(last_rc == 2);
  bad("bench moe", "--w4-wk-up 3", "--w4-wk-up '3' is not 0, 1, 2, 4 or 8");
  CHECK(last_rc == 2);
  bad("bench moe", "--w4-wk-dn 16", "--w4-wk-dn '16' is not 0, 1, 2, 4 or 8");
  CHECK(last_rc == 2);
  bad("compare", "--config kimi_k25 --quant nf4", "--quant 'nf4' is not a storage of the routed experts; use --quant bf16, int4 or fp8");
  CHECK(last_rc == 2);
  bad("compare", "--model /nonexistent --quant int4", "--quant sets synthetic weights but --model's checkpoint comes as stored; drop --quant or --model");
  CHECK(last_rc == 2);
  bad("compare", "--config kimi_k25 --quant", "--quant needs a value");
  CHECK(last_rc == 2);
  /* bench X --help prints the options in every build (a build without CUDA printed its refusal);
   * without CUDA, running one is refused in one line. */
  static const char *const benches[] = {"gemm", "ar", "attn", "moe", "step"};
  for (int i = 0; i < 5; i++) {
    char want[64];
    snprintf(args, sizeof args, "bench %s --help", benches[i]);
    snprintf(want, sizeof want, "usage: prezero bench %s", benches[i]);
    int rc = run(args);
    if (!(rc == 0 && !strncmp(out_txt, want, strlen(want)) && err_txt[0] == 0)) {
      fprintf(stderr, "FAIL: prezero %s -> exit %d, stdout [%.80s], stderr [%s]\n", args, rc, out_txt, err_txt);
      pz_test_failures++;
    }
    snprintf(args, sizeof args, "bench %s -h", benches[i]);
    CHECK(run(args) == 0 && !strncmp(out_txt, want, strlen(want)));
    snprintf(args, sizeof args, "bench %s", benches[i]);
#ifndef PZ_HAVE_CUDA
    bad(args, "", "this build has no CUDA backend; rebuild with nvcc present");
#else
    /* Without a GPU each one is refused in one line saying how many it needs and what to do. */
    if (pz_gpu_count() == 0) bad(args, "", "needs 1 GPU, 0 visible; run it on a machine with a CUDA GPU");
#endif
  }
  /* prezero tune: --help in every build; its refusals name "prezero tune", not "prezero bench". */
  CHECK(run("tune --help") == 0 && !strncmp(out_txt, "usage: prezero tune", 19) && err_txt[0] == 0);
#ifndef PZ_HAVE_CUDA
  bad("tune", "", "this build has no CUDA backend; rebuild with nvcc present");
#else
  bad("tune", "--m 0", "--m 0 is not a list of batch sizes 1..256; write it like --m 1,4,8");
  CHECK(last_rc == 2);
  bad("tune", "--bogus", "unknown option '--bogus'");
  CHECK(last_rc == 2);
  bad("tune", "--only", "--only needs a value");
  CHECK(last_rc == 2);
  /* One process per TP rank (run --procs / --rank --world --id-file): usage errors in every build,
   * exit 2 before anything is forked; without a GPU, the ranks' refusal comes back as one line. */
  bad("run", "--procs 1", "--procs 1 is out of range; use --procs 2..8");
  CHECK(last_rc == 2);
  bad("run", "--procs 0", "--procs 0 is out of range; use --procs 2..8");
  CHECK(last_rc == 2);
  bad("run", "--rank -1 --world 2 --id-file /tmp/pz_cli_id", "one process per rank needs --rank 0..W-1");
  CHECK(last_rc == 2);
  bad("run", "--procs 2 --rank 0", "--procs forks every rank itself; give either --procs N or --rank/--world/--id-file");
  CHECK(last_rc == 2);
  bad("run", "--rank 0 --world 2", "one process per rank needs --rank 0..W-1, --world W (2..8) and --id-file F together");
  CHECK(last_rc == 2);
  bad("run", "--rank 2 --world 2 --id-file /tmp/pz_cli_id", "one process per rank needs --rank 0..W-1");
  CHECK(last_rc == 2);
  bad("run", "--rank 1 --world 2 --id-file /tmp/pz_cli_id --tp 4", "--tp 4 but 2 ranks (--world); leave --tp out or make them equal");
  CHECK(last_rc == 2);
  bad("run", "--procs 2 --device cpu", "one process per rank runs on the CUDA backend; drop --device cpu");
  CHECK(last_rc == 2);
  bad("run", "--procs 2 --timeout-s 0", "--timeout-s 0 is out of range; use --timeout-s 1..3600");
  CHECK(last_rc == 2);
#ifdef PZ_HAVE_CUDA
  if (pz_gpu_count() == 0) {
    bad("run", "--procs 2", "no CUDA GPU is visible; one rank per process needs one");
    CHECK(last_rc == 1);
    bad("run", "--rank 1 --world 2 --id-file /tmp/pz_cli_id_none", "no CUDA GPU is visible; one rank per process needs one");
    CHECK(last_rc == 1);
  }
#else
  bad("run", "--procs 2", "this build has no CUDA backend");
  CHECK(last_rc != 0);
#endif
  bad("compare", "--procs 2 --rank 0", "--procs forks every rank itself; give either --procs N or --rank/--world/--id-file");
  CHECK(last_rc == 2);
  bad("compare", "--rank 1 --world 2", "one process per rank needs --rank 0..W-1, --world W (2..8) and --id-file F together");
  CHECK(last_rc == 2);
  bad("compare", "--procs 2 --tp 4", "--tp differs from the number of ranks; leave --tp out or make them equal");
  CHECK(last_rc == 2);
  /* bench gemm --only that selects nothing is refused before any GPU is looked for. */
  bad("bench gemm", "--only Kimi-K2/1/", "--only 'Kimi-K2/1/' matches no shape; labels look like 'Kimi-K2/tp1/qkv_a'");
  CHECK(last_rc == 2);
  /* Bad values name the fix after "; " (they said only what was wrong), before any GPU is looked for. */
  bad("bench gemm", "--m 0", "--m '0' is not a list of batch sizes 1..256; use --m 1,4,8");
  CHECK(last_rc == 2);
  bad("bench ar", "--procs 0", "--procs '0' is not an integer in 2..8; use --procs 2..8");
  CHECK(last_rc == 2);
  bad("bench attn", "--ctx 0", "--ctx 0 is out of range; use --ctx 1..32768");
  CHECK(last_rc == 2);
  bad("bench attn", "--tp 3", "TP 3 does not divide Kimi-K2's 64 heads; use --tp 1, 2, 4");
  CHECK(last_rc == 2);
  bad("tune", "--pool-mb 1", "--pool-mb 1 is out of range; use --pool-mb 256..65536");
  CHECK(last_rc == 2);
  bad("tune", "--pool-mb 1k", "--pool-mb needs an integer, got '1k'");
  CHECK(last_rc == 2);
  /* a value beyond 64 bits is named as typed, not as the clamped LLONG_MAX */
  bad("tune", "--pool-mb 99999999999999999999", "99999999999999999999");
  CHECK(last_rc == 2 && !strstr(err_txt, "9223372036854775807"));
  if (pz_gpu_count() == 0) {
    bad("tune", "", "tuning needs 1 GPU, 0 visible; run it on a machine with a CUDA GPU");
    CHECK(last_rc == 1);
  }
#endif
#ifdef PZ_HAVE_CUDA
  if (pz_gpu_count() == 0) {
    bad("bench ar", "--tp 2", "--tp 2 needs 2 GPUs, 0 visible; run it on a machine with at least 2 GPUs");
    bad("bench step", "--tp 2,4", "TP 2 needs 2 GPUs, 0 visible; run it on a machine with at least 2 GPUs");
  }
#endif

  snprintf(text, sizeof text, "rm -rf %s", dir);
  if (system(text)) fprintf(stderr, "could not remove %s\n", dir);
  TEST_DONE();
}
