// tj-run: runs tools over one .tj graph. Implemented so far:
//
//   tj-run --scoreboard FILE.tj [--sym NAME=VALUE]...
//
// prints, per pipeline stage (eager, canonicalize, decompose, fuse,
// memplan), the kernels the graph would launch, the bytes they move, the
// memory held at the peak, graph breaks and the share of nodes compiled,
// for the given symbol values (tj_graph_scoreboard in tj_optimize.h).
// "moved" is bytes read + written, also as a multiple of the activation
// (the bytes of the graph's outputs).

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorjit.h"

enum { kMaxSyms = 64 };

static void usage(FILE* out) {
  fprintf(out,
          "usage: tj-run --scoreboard FILE.tj [--sym NAME=VALUE]...\n"
          "Prints the optimizer's scoreboard for a .tj graph: kernels,\n"
          "bytes moved and peak memory per pipeline stage.\n");
}

static char* read_file(const char* path, size_t* out_length) {
  FILE* f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "tj-run: cannot open '%s'\n", path);
    return NULL;
  }
  size_t length = 0, capacity = 4096;
  char* data = malloc(capacity);
  while (data) {
    if (length == capacity) {
      char* grown = realloc(data, capacity * 2);
      if (!grown) {
        free(data);
        data = NULL;
        break;
      }
      data = grown;
      capacity *= 2;
    }
    size_t n = fread(data + length, 1, capacity - length, f);
    length += n;
    if (n == 0) break;
  }
  bool error = ferror(f);
  if (f != stdin) fclose(f);
  if (!data || error) {
    fprintf(stderr, "tj-run: cannot read '%s'\n", path);
    free(data);
    return NULL;
  }
  *out_length = length;
  return data;
}

static double mb(int64_t bytes) { return (double)bytes / 1e6; }

static void print_scoreboard(const tj_graph_t* graph, int32_t num_syms,
                             char** names, const int64_t* values,
                             const tj_scoreboard_t* sb) {
  (void)graph;
  printf("scoreboard");
  for (int32_t i = 0; i < num_syms; ++i) {
    printf(" %s=%lld", names[i], (long long)values[i]);
  }
  printf("\nactivation (outputs) %.2f MB, inputs and constants %.2f MB\n\n",
         mb(sb->activation_bytes), mb(sb->input_bytes));
  printf("%-13s %6s %8s %10s %10s %10s %8s %10s %7s %9s\n", "stage", "nodes",
         "kernels", "read MB", "write MB", "moved MB", "x act", "peak MB",
         "breaks", "compiled");
  for (int s = 0; s < TJ_STAGE_COUNT_; ++s) {
    const tj_scoreboard_row_t* r = &sb->rows[s];
    int64_t moved = r->bytes_read + r->bytes_written;
    double ratio = sb->activation_bytes
                       ? (double)moved / (double)sb->activation_bytes
                       : 0.0;
    printf(
        "%-13s %6lld %8lld %10.2f %10.2f %10.2f %8.2f %10.2f %7lld %8.0f%%\n",
        tj_stage_name(r->stage), (long long)r->nodes, (long long)r->kernels,
        mb(r->bytes_read), mb(r->bytes_written), mb(moved), ratio,
        mb(r->peak_bytes), (long long)r->graph_breaks, r->percent_compiled);
  }
  printf("\nmemplan arena %.2f MB (most intermediates live at once: %.2f MB)\n",
         mb(sb->arena_bytes), mb(sb->live_peak_bytes));
}

int main(int argc, char** argv) {
  const char* path = NULL;
  bool scoreboard = false;
  char* names[kMaxSyms];
  int64_t values[kMaxSyms];
  int32_t num_syms = 0;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (strcmp(a, "--scoreboard") == 0) {
      scoreboard = true;
    } else if (strcmp(a, "--sym") == 0 || strncmp(a, "--sym=", 6) == 0) {
      const char* spec =
          a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
      const char* eq = spec ? strchr(spec, '=') : NULL;
      char* end = NULL;
      long long v = eq ? strtoll(eq + 1, &end, 10) : 0;
      if (!eq || eq == spec || !end || *end || end == eq + 1 ||
          num_syms == kMaxSyms) {
        fprintf(stderr, "tj-run: --sym wants NAME=VALUE, got '%s'\n",
                spec ? spec : "");
        return 1;
      }
      names[num_syms] = strndup(spec, (size_t)(eq - spec));
      values[num_syms++] = v;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr, "tj-run: unknown option '%s'\n", a);
      usage(stderr);
      return 1;
    } else if (path) {
      fprintf(stderr, "tj-run: more than one input file\n");
      return 1;
    } else {
      path = a;
    }
  }
  if (!scoreboard || !path) {
    usage(stderr);
    return 1;
  }
  size_t length = 0;
  char* text = read_file(path, &length);
  if (!text) return 1;
  tj_context_t* context = NULL;
  tj_graph_t* graph = NULL;
  tj_scoreboard_t sb;
  tj_status_t status = tj_context_create(NULL, &context);
  if (!status) status = tj_graph_parse(context, text, length, path, &graph);
  if (!status) {
    status = tj_graph_scoreboard(graph, num_syms, (const char* const*)names,
                                 values, &sb);
  }
  if (!status) print_scoreboard(graph, num_syms, names, values, &sb);
  int rc = 0;
  if (status) {
    fprintf(stderr, "tj-run: %s\n", tj_status_message(status));
    tj_status_free(status);
    rc = 1;
  }
  tj_graph_destroy(graph);
  tj_context_destroy(context);
  for (int32_t i = 0; i < num_syms; ++i) free(names[i]);
  free(text);
  return rc;
}
