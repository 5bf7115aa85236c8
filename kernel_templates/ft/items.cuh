// kernel_templates/ft/items.cuh: stepping through a block's work items without a division per item.
#pragma once

// The (query head, query tile) of a dK / dV block's work items in order, stepped one item at a time: item i
// is head i / count, tile i % count of the block's range, without a division per item (a division by a
// runtime count is ~20 instructions, and its I2F was the hottest stall of the dK / dV loop on GPT-OSS).
struct FtItemCursor {
  int head, tile, count;
  __device__ __forceinline__ FtItemCursor(int first_item, int t_count)
      : head(t_count > 0 ? first_item / t_count : 0), tile(t_count > 0 ? first_item % t_count : 0), count(t_count) {}
  __device__ __forceinline__ void next() {
    if (++tile == count) tile = 0, ++head;
  }
};
