// The random-graph differential test (tests/unit/x86_random_graph_test.c)
// on the CUDA target: the same seeds' large graphs, compile options and
// mismatch classification, compiled for CUDA and compared with the
// reference (issue 19: every backend against the reference). Skipped
// without a GPU. CI's GPU-less machines skip it; on the GPU machine,
// `cuda_random_graph_test FIRST COUNT` runs a shard.

#define TJ_RANDOM_GRAPH_CUDA 1
#include "tests/unit/x86_random_graph_test.c"
