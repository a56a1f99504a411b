// backends/runtime/host_tensor.c: see host_tensor.h.

#include "backends/runtime/host_tensor.h"

#include <string.h>

bool tj_host_tensor_dense(const tj_tensor_t* t) {
  if (!t->strides) return true;
  int64_t expect = 1;
  for (int32_t d = t->rank; d-- > 0;) {
    if (t->shape[d] == 0) return true;
    if (t->shape[d] != 1 && t->strides[d] != expect) return false;
    expect *= t->shape[d];
  }
  return true;
}

unsigned char* tj_host_byte_at(void* base, int64_t offset) {
  return base ? (unsigned char*)base + offset : NULL;
}

unsigned char* tj_host_tensor_data(const tj_tensor_t* t) {
  // byte_offset is unsigned: as an int64 one of 2^63 or more would move the
  // pointer backwards (tj_ir_check_run_memory has checked that the sum does
  // not wrap).
  return t->data ? (unsigned char*)t->data + t->byte_offset : NULL;
}

int64_t tj_host_numel(int32_t rank, const int64_t* dims) {
  int64_t n = 1;
  for (int32_t d = 0; d < rank; ++d) n *= dims[d];
  return n;
}

void tj_host_copy_strided(unsigned char* dst, const int64_t* dst_strides,
                          const unsigned char* src, const int64_t* src_strides,
                          int32_t rank, const int64_t* shape, size_t size) {
  int64_t n = tj_host_numel(rank, shape);
  if (n == 0) return;
  if (rank == 0 || (!dst_strides && !src_strides)) {
    memcpy(dst, src, (size_t)n * size);
    return;
  }
  int64_t ds[TJ_MAX_RANK], ss[TJ_MAX_RANK], idx[TJ_MAX_RANK] = {0};
  int64_t s = 1;
  for (int32_t d = rank; d-- > 0;) {
    ds[d] = dst_strides ? dst_strides[d] : s;
    ss[d] = src_strides ? src_strides[d] : s;
    s *= shape[d];
  }
  int64_t inner = shape[rank - 1];
  bool contiguous = ds[rank - 1] == 1 && ss[rank - 1] == 1;
  for (int64_t done = 0; done < n; done += inner) {
    int64_t doff = 0, soff = 0;
    for (int32_t d = 0; d + 1 < rank; ++d) {
      doff += idx[d] * ds[d];
      soff += idx[d] * ss[d];
    }
    if (contiguous) {
      memcpy(dst + doff * (int64_t)size, src + soff * (int64_t)size,
             (size_t)inner * size);
    } else {
      for (int64_t i = 0; i < inner; ++i) {
        memcpy(dst + (doff + i * ds[rank - 1]) * (int64_t)size,
               src + (soff + i * ss[rank - 1]) * (int64_t)size, size);
      }
    }
    for (int32_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

tj_status_t tj_host_check_outputs(const tj_graph_t* g,
                                  const tj_tensor_t* outputs,
                                  const int64_t* sym, bool allow_cuda) {
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    const tj_tensor_t* t = &outputs[i];
    uint32_t node = g->outputs[i].node;
    const tj_node_t* n = &g->nodes[node];
    const char* name = g->outputs[i].name;
    TJ_RETURN_IF_ERROR(tj_ir_check_device(t, "output", name, allow_cuda));
    if (t->dtype != n->dtype || t->rank != n->rank) {
      return tj_invalid(
          "output \"%s\" is %s of rank %d but the graph makes "
          "%s of rank %d",
          name, tj_dtype_name(t->dtype), (int)t->rank, tj_dtype_name(n->dtype),
          (int)n->rank);
    }
    int64_t dims[TJ_MAX_RANK];
    TJ_RETURN_IF_ERROR(tj_ir_concrete_dims(g, node, sym, dims));
    if (n->rank > 0 && !t->shape) {
      return tj_invalid("output \"%s\": shape is NULL", name);
    }
    for (int32_t d = 0; d < n->rank; ++d) {
      if (t->shape[d] != dims[d]) {
        return tj_invalid(
            "output \"%s\" dim %d is %lld but these inputs "
            "make %lld",
            name, (int)d, (long long)t->shape[d], (long long)dims[d]);
      }
    }
    if (!t->data && tj_host_numel(n->rank, dims) > 0) {
      return tj_invalid("output \"%s\": data is NULL", name);
    }
  }
  return NULL;
}
