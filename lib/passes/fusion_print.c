// The grouped text form and the Graphviz form of fusion groups, and
// tj_plan_print. Node lines come from tj_graph_print itself (one line per
// non-input node, in node order, by its contract), so a fused body reads
// exactly like the plain IR and the two can never drift apart:
//
//   func @block[B](%x: bf16[B,1024], %w: bf16[1024,4096], %b: bf16[4096]) {
//     %3 = constant [0.0713548139] : f32[]
//     %11 = fused.matmul(%x, %w, %b, %3, %5) : bf16[B,4096] {
//       %6 = matmul %x, %w : bf16[B,4096]
//       ...
//       %11 = cast %10 : bf16[B,4096]
//     }
//     return %11 as "y"
//   }
//
// Multi-output groups print "%a, %b = fused.<kind>(...) : t1, t2 {". With a
// memory plan each group line ends in where its outputs go, and a summary
// of the slots closes the function.

#include <stdio.h>
#include <string.h>

#include "lib/passes/memplan.h"

typedef struct text_t {
  tj_allocator_t allocator;
  char* data;
  size_t length, capacity;
  bool failed;
} text_t;

static void put(text_t* t, const char* s, size_t n) {
  if (t->failed) return;
  if (t->length + n + 1 > t->capacity) {
    size_t cap = t->capacity ? t->capacity : 1024;
    while (cap < t->length + n + 1) cap *= 2;
    char* grown = tj_realloc(t->allocator, t->data, t->capacity, cap);
    if (!grown) {
      t->failed = true;
      return;
    }
    t->data = grown;
    t->capacity = cap;
  }
  memcpy(t->data + t->length, s, n);
  t->length += n;
  t->data[t->length] = '\0';
}

static void puts_(text_t* t, const char* s) { put(t, s, strlen(s)); }

static void printf_(text_t* t, const char* format, ...) TJ_PRINTF_LIKE(2, 3);
static void printf_(text_t* t, const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  int n = vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  if (n < 0) {
    t->failed = true;
    return;
  }
  put(t, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

// Hands |t| back as an exact-size string (tj_context_free_string frees
// strlen + 1 bytes).
static tj_status_t finish(text_t* t, char** out) {
  *out = NULL;
  if (!t->failed && !t->data) puts_(t, "");
  if (t->failed) {
    tj_free(t->allocator, t->data, t->capacity);
    return tj_status_oom();
  }
  char* exact = tj_realloc(t->allocator, t->data, t->capacity, t->length + 1);
  if (!exact) {
    tj_free(t->allocator, t->data, t->capacity);
    return tj_status_oom();
  }
  *out = exact;
  return NULL;
}

// The printed graph cut into lines: |line_of| maps a non-input node to its
// line; |name| to its "%ref" spelling.
typedef struct lines_t {
  char* text;          // owned (tj_graph_print)
  const char* header;  // "func ..." up to '\n'
  size_t header_length;
  const char* footer;  // "  return ...\n}\n"
  const char** line;   // per node; NULL for inputs
  size_t* line_length;
  char** ref;  // per node: "%name" (owned copies)
} lines_t;

static void lines_free(const tj_graph_t* g, lines_t* l) {
  tj_allocator_t al = g->allocator;
  if (l->ref) {
    for (uint32_t i = 0; i < g->num_nodes; ++i) tj_free_string(al, l->ref[i]);
    tj_free(al, l->ref, sizeof(char*) * (g->num_nodes ? g->num_nodes : 1));
  }
  if (l->line)
    tj_free(al, l->line, sizeof(char*) * (g->num_nodes ? g->num_nodes : 1));
  if (l->line_length) {
    tj_free(al, l->line_length,
            sizeof(size_t) * (g->num_nodes ? g->num_nodes : 1));
  }
  tj_context_free_string(g->context, l->text);
  memset(l, 0, sizeof(*l));
}

static tj_status_t lines_init(const tj_graph_t* g, lines_t* l) {
  memset(l, 0, sizeof(*l));
  TJ_RETURN_IF_ERROR(tj_graph_print(g, &l->text));
  tj_allocator_t al = g->allocator;
  size_t n = g->num_nodes ? g->num_nodes : 1;
  l->line = tj_calloc(al, n, sizeof(char*));
  l->line_length = tj_calloc(al, n, sizeof(size_t));
  l->ref = tj_calloc(al, n, sizeof(char*));
  if (!l->line || !l->line_length || !l->ref) {
    lines_free(g, l);
    return tj_status_oom();
  }
  const char* s = l->text;
  const char* nl = strchr(s, '\n');
  if (!nl) {
    lines_free(g, l);
    return tj_internal("fusion print: unexpected printer output");
  }
  l->header = s;
  l->header_length = (size_t)(nl - s);
  s = nl + 1;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    if (g->nodes[i].op == TJ_OP_INPUT) {
      char buf[256];
      snprintf(buf, sizeof(buf), "%%%s", g->nodes[i].attrs.name);
      l->ref[i] = tj_strdup(al, buf);
    } else {
      nl = strchr(s, '\n');
      const char* eq = strstr(s, " = ");
      if (!nl || !eq || eq > nl || strncmp(s, "  %", 3) != 0) {
        lines_free(g, l);
        return tj_internal(
            "fusion print: node %u's line is not where the "
            "printer contract puts it",
            i);
      }
      l->line[i] = s;
      l->line_length[i] = (size_t)(nl - s);
      size_t ref_length = (size_t)(eq - (s + 2));
      char* ref = tj_alloc(al, ref_length + 1);
      if (ref) {
        memcpy(ref, s + 2, ref_length);
        ref[ref_length] = '\0';
      }
      l->ref[i] = ref;
      s = nl + 1;
    }
    if (!l->ref[i]) {
      lines_free(g, l);
      return tj_status_oom();
    }
  }
  l->footer = s;
  return NULL;
}

// The type at the end of node |i|'s line (after the last " : ").
static void type_of(const lines_t* l, uint32_t i, const char** out,
                    size_t* length) {
  const char* s = l->line[i];
  size_t n = l->line_length[i];
  size_t k = n;
  while (k >= 3 && memcmp(s + k - 3, " : ", 3) != 0) --k;
  *out = s + k;
  *length = n - k;
}

static tj_status_t print_grouped(const tj_fusion_t* fu, const tj_memplan_t* mp,
                                 const tj_graph_t* g, char** out_text) {
  lines_t l;
  TJ_RETURN_IF_ERROR(lines_init(g, &l));
  text_t t = {.allocator = g->allocator};
  put(&t, l.header, l.header_length);
  puts_(&t, "\n");
  // Constants are read by groups, computed by none.
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    if (g->nodes[i].op == TJ_OP_CONSTANT) {
      put(&t, l.line[i], l.line_length[i]);
      puts_(&t, "\n");
    }
  }
  for (uint32_t p = 0; p < fu->num_groups; ++p) {
    const tj_group_t* grp = &fu->groups[p];
    puts_(&t, "  ");
    for (uint32_t k = 0; k < grp->num_outputs; ++k) {
      if (k) puts_(&t, ", ");
      puts_(&t, l.ref[grp->outputs[k]]);
    }
    printf_(&t, " = fused.%s(", tj_group_kind_name(grp->kind));
    for (uint32_t k = 0; k < grp->num_inputs; ++k) {
      if (k) puts_(&t, ", ");
      puts_(&t, l.ref[grp->inputs[k]]);
    }
    puts_(&t, ") : ");
    for (uint32_t k = 0; k < grp->num_outputs; ++k) {
      const char* type;
      size_t n;
      type_of(&l, grp->outputs[k], &type, &n);
      if (k) puts_(&t, ", ");
      put(&t, type, n);
    }
    puts_(&t, " {");
    if (mp) {
      puts_(&t, "  //");
      for (uint32_t k = 0; k < grp->num_outputs; ++k) {
        const tj_buffer_t* b = &mp->buffers[mp->buffer_of[grp->outputs[k]]];
        printf_(&t, " %s->", l.ref[b->node]);
        switch (b->kind) {
          case TJ_BUFFER_ARENA:
            printf_(&t, "slot%u", b->slot);
            if (b->in_place_of != TJ_NODE_NONE) {
              printf_(&t, "(in place of %s)", l.ref[b->in_place_of]);
            }
            break;
          case TJ_BUFFER_OUTPUT:
            puts_(&t, "output");
            break;
          case TJ_BUFFER_ALIAS:
            printf_(&t, "alias(%s)", l.ref[b->alias_of]);
            break;
          case TJ_BUFFER_EXTERNAL:
            puts_(&t, "external");
            break;
        }
      }
    }
    puts_(&t, "\n");
    for (uint32_t j = 0; j < grp->num_nodes; ++j) {
      puts_(&t, "  ");
      put(&t, l.line[grp->nodes[j]], l.line_length[grp->nodes[j]]);
      puts_(&t, "\n");
    }
    puts_(&t, "  }\n");
  }
  const char* end = strstr(l.footer, "\n}");
  if (end) {
    put(&t, l.footer, (size_t)(end - l.footer) + 1);
  } else {
    puts_(&t, l.footer);
  }
  if (mp) {
    printf_(&t, "  // memplan: %u slots, %u in place\n", mp->num_slots,
            mp->num_in_place);
    for (uint32_t s = 0; s < mp->num_slots; ++s) {
      printf_(&t, "  //   slot%u = max(", s);
      for (uint32_t k = 0; k < mp->slots[s].num_sizes; ++k) {
        char buf[256];
        tj_mem_size_format(&mp->slots[s].sizes[k], g, buf, sizeof(buf));
        printf_(&t, "%s%s", k ? ", " : "", buf);
      }
      puts_(&t, ") bytes\n");
    }
  }
  if (end) puts_(&t, end + 1);
  lines_free(g, &l);
  return finish(&t, out_text);
}

tj_status_t tj_fusion_print(const tj_fusion_t* fusion, const tj_graph_t* graph,
                            char** out_text) {
  return print_grouped(fusion, NULL, graph, out_text);
}

tj_status_t tj_plan_print(const tj_plan_t* plan, char** out_text) {
  if (!plan->fusion) return tj_graph_print(plan->graph, out_text);
  return print_grouped(plan->fusion, plan->memplan, plan->graph, out_text);
}

// A line of the IR as a dot label: quotes and backslashes escaped.
static void put_label(text_t* t, const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (s[i] == '"' || s[i] == '\\') put(t, "\\", 1);
    put(t, &s[i], 1);
  }
}

tj_status_t tj_fusion_dot(const tj_fusion_t* fu, const tj_graph_t* g,
                          char** out_text) {
  lines_t l;
  TJ_RETURN_IF_ERROR(lines_init(g, &l));
  text_t t = {.allocator = g->allocator};
  puts_(&t, "digraph \"");
  put_label(&t, g->name ? g->name : "main", strlen(g->name ? g->name : "main"));
  puts_(&t, "\" {\n  node [shape=box, fontname=\"monospace\"];\n");
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    tj_op_t op = g->nodes[i].op;
    if (op != TJ_OP_INPUT && op != TJ_OP_CONSTANT) continue;
    printf_(&t, "  n%u [shape=ellipse, label=\"", i);
    if (op == TJ_OP_INPUT) {
      puts_(&t, l.ref[i]);
    } else {
      const char* type;
      size_t n;
      type_of(&l, i, &type, &n);
      printf_(&t, "%s = constant : ", l.ref[i]);
      put_label(&t, type, n);
    }
    puts_(&t, "\"];\n");
  }
  // A recomputed node appears in every group that computes it, so nodes are
  // named per group: g<group>_<node>.
  for (uint32_t p = 0; p < fu->num_groups; ++p) {
    const tj_group_t* grp = &fu->groups[p];
    printf_(&t,
            "  subgraph cluster_%u {\n    label=\"%u: %s\";\n"
            "    style=filled; color=lightgrey;\n",
            p, p, tj_group_kind_name(grp->kind));
    for (uint32_t j = 0; j < grp->num_nodes; ++j) {
      uint32_t v = grp->nodes[j];
      printf_(&t, "    g%u_%u [label=\"", p, v);
      put_label(&t, l.line[v] + 2, l.line_length[v] - 2);
      puts_(&t, "\"");
      if (fu->producer[v] == p) puts_(&t, ", penwidth=2");
      puts_(&t, "];\n");
    }
    puts_(&t, "  }\n");
    for (uint32_t j = 0; j < grp->num_nodes; ++j) {
      uint32_t v = grp->nodes[j];
      const tj_node_t* node = &g->nodes[v];
      for (uint32_t q = 0; q < node->num_operands; ++q) {
        uint32_t o = node->operands[q];
        if (o == TJ_NODE_NONE) continue;
        bool inside = false;
        for (uint32_t k = 0; k < grp->num_nodes && !inside; ++k) {
          inside = grp->nodes[k] == o;
        }
        if (inside) {
          printf_(&t, "  g%u_%u -> g%u_%u;\n", p, o, p, v);
        } else if (fu->producer[o] != TJ_GROUP_NONE) {
          printf_(&t, "  g%u_%u -> g%u_%u [style=bold];\n", fu->producer[o], o,
                  p, v);
        } else {
          printf_(&t, "  n%u -> g%u_%u;\n", o, p, v);
        }
      }
    }
  }
  puts_(&t, "}\n");
  lines_free(g, &l);
  return finish(&t, out_text);
}
