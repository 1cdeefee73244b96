/* A 64-bit fingerprint of a decode graph: FNV-1a over its text dump (pz_graph_dump_text) followed by
 * every node's parameters printed exactly (hex floats) and each tensor's seeded-fill parameters, so
 * two graphs agree exactly when their nodes, parameters, shapes, dtypes and views agree. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "core/fingerprint.h"

uint64_t pz_fnv1a64(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL; /* the 64-bit FNV prime */
  }
  return h;
}

/* Every parameter of the rope, exactly (hex floats): the dump prints few of them, and %g rounds. */
static void rope_exact(const pz_rope_params *r, FILE *f) {
  fprintf(f, " rope(%a %a %lld %a %a %a %a %d %a %a)", r->theta, r->factor, (long long)r->original_max_position_embeddings,
          r->beta_fast, r->beta_slow, r->mscale, r->mscale_all_dim, (int)r->type, r->low_freq_factor, r->high_freq_factor);
  if (r->type != PZ_ROPE_LONGROPE) return; /* the other types print as before */
  fprintf(f, " longrope(%a %d", r->attention_factor, (int)r->n_factors);
  for (int i = 0; i < r->n_factors && i < PZ_ROPE_MAX_FACTORS; i++) fprintf(f, " %a %a", r->short_factor[i], r->long_factor[i]);
  fprintf(f, ")");
}

/* Every field of a node's parameters, exactly, after the dump: what the dump leaves out (rope,
 * routed_scaling_factor, softmax scales) or rounds (eps with %g) still changes the fingerprint. */
static void params_exact(const pz_node *n, FILE *f) {
  const pz_op_params *p = &n->p;
  fprintf(f, "%d %d", n->id, (int)n->op);
  switch (n->op) {
    case PZ_OP_GEMM: case PZ_OP_LM_HEAD: case PZ_OP_MM_MAYBE_PREZERO:
      fprintf(f, " %d %d %d %lld %lld", p->gemm.zero_init, p->gemm.split_k, p->gemm.prezero_buf,
              (long long)p->gemm.n_base, (long long)p->gemm.col_offset);
      break;
    case PZ_OP_RMSNORM: case PZ_OP_AR_RMSNORM: case PZ_OP_AR_RMSNORM_MAYBE_PREZERO:
      fprintf(f, " %a %d %d %lld %lld", p->norm.eps, p->norm.has_residual, p->norm.fill_buf, (long long)p->norm.n_total,
              (long long)p->norm.n_base);
      break;
    case PZ_OP_MLA_ATTN: {
      const pz_mla_params *m = &p->mla;
      fprintf(f, " %d %lld %lld %lld %lld %lld %lld %lld %a %a %lld %lld %lld %lld", m->n_heads, (long long)m->hidden,
              (long long)m->q_lora_rank, (long long)m->kv_lora_rank, (long long)m->qk_nope_head_dim,
              (long long)m->qk_rope_head_dim, (long long)m->v_head_dim, (long long)m->max_ctx, m->eps, m->softmax_scale,
              (long long)m->prezero_n_total, (long long)m->prezero_n_base, (long long)m->qb_col_offset,
              (long long)m->oproj_col_offset);
      rope_exact(&m->rope, f);
      break;
    }
    case PZ_OP_GQA_ATTN: {
      const pz_gqa_params *q = &p->gqa;
      fprintf(f, " %d %d %lld %lld %lld %a %a %lld %lld %lld", q->n_heads, q->n_kv_heads, (long long)q->head_dim,
              (long long)q->hidden, (long long)q->max_ctx, q->eps, q->softmax_scale, (long long)q->prezero_n_total,
              (long long)q->prezero_n_base, (long long)q->oproj_col_offset);
      rope_exact(&q->rope, f);
      if (q->rotary_dim) fprintf(f, " rd %lld", (long long)q->rotary_dim); /* partial RoPE only: others print as before */
      if (q->window) fprintf(f, " sw %lld", (long long)q->window); /* sliding layers only: others print as before */
      break;
    }
    case PZ_OP_MOE: {
      const pz_moe_params *e = &p->moe;
      fprintf(f, " %d %d %d %d %d %d %d %a %lld %lld %d %lld %lld %lld", e->n_experts, e->top_k, e->n_group,
              e->topk_group, (int)e->scoring, (int)e->topk_method, e->norm_topk_prob, e->routed_scaling_factor,
              (long long)e->inter, (long long)e->shared_inter, e->wquant, (long long)e->q_group,
              (long long)e->q_block_rows, (long long)e->q_block_cols);
      if (e->prezero_n_total > 0) /* the shared gate | up slot (only rewritten graphs: others print as before) */
        fprintf(f, " pz %lld %lld %lld", (long long)e->prezero_n_total, (long long)e->prezero_n_base,
                (long long)e->sh_gu_col_offset);
      break;
    }
    case PZ_OP_DENSE_MLP: case PZ_OP_SILU_MUL: fprintf(f, " %lld", (long long)p->mlp.inter); break;
    case PZ_OP_EMBEDDING: case PZ_OP_ARGMAX:
      fprintf(f, " %lld %lld", (long long)p->vocab.vocab_size, (long long)p->vocab.vocab_per_rank);
      break;
    default: break;
  }
  fprintf(f, "\n");
}

pz_status pz_graph_fingerprint(const pz_graph *g, uint64_t *fp) {
  if (!g || !fp) return pz_error(PZ_ERR_INVALID_ARG, "graph fingerprint: NULL graph or result");
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return pz_error(PZ_ERR_OOM, "graph fingerprint: cannot open a memory stream");
  pz_status st = pz_graph_dump_text(g, f);
  fprintf(f, "# exact: %a %lld %d\n", g->info.rms_eps, (long long)g->info.vocab_size, g->info.n_layers);
  for (int i = 0; i < g->n_nodes && st == PZ_OK; i++) params_exact(&g->nodes[i], f);
  for (int i = 0; i < g->n_tensors && st == PZ_OK; i++) /* how the seeded weights are drawn */
    fprintf(f, "t%d %a %a %d %d\n", i, g->tensors[i].init_scale, g->tensors[i].init_offset, (int)g->tensors[i].kind,
            g->tensors[i].shard_dim);
  if (fclose(f) != 0 && st == PZ_OK) st = pz_error(PZ_ERR_OOM, "graph fingerprint: the dump did not fit in memory");
  if (st == PZ_OK) *fp = pz_fnv1a64(PZ_FNV1A64_OFFSET, buf, len);
  free(buf);
  return st;
}
