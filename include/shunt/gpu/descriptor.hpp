// shunt/gpu/descriptor.hpp: builds the flat pack descriptor of shunt/gpu/index.hpp from a canonical
// layout, an extent and an element count, on the host (the table it owns is host memory).
#pragma once

#include <shunt/datatype/layout.hpp>
#include <shunt/gpu/index.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace shunt::gpu {

/// The flat descriptor of `count` elements of a type with canonical layout `form` and extent
/// `extent`: the element count becomes the outermost dimension, dimensions that tile each other
/// merge, and an innermost dimension over one block whose stride equals the block length folds
/// into the block (so a dense type is one block: a plain copy). Owns its table; immutable and
/// safe to share between threads once built. Throws shunt::unsupported when an offset or size
/// overflows 64 bits.
class flat_form {
public:
    flat_form(const layout& form, std::int64_t extent, std::int64_t count) {
        struct level {
            std::int64_t count, stride;
        };
        std::vector<level> levels;
        std::vector<block> blocks;
        for (const auto& b : form.blocks)
            if (b.length > 0) blocks.push_back(b);
        const bool empty = count <= 0 || blocks.empty() ||
                           std::any_of(form.dims.begin(), form.dims.end(), [](const dim& d) { return d.count <= 0; });
        if (!empty) {
            if (count != 1) levels.push_back({count, extent});
            for (const auto& d : form.dims)
                if (d.count != 1) levels.push_back({d.count, d.stride});
            for (bool changed = true; changed;) {
                changed = false;
                for (std::size_t k = levels.size(); k-- > 1;) {  // outer tiles inner: one dimension
                    if (levels[k - 1].stride == shunt::detail::checked_mul(levels[k].count, levels[k].stride)) {
                        levels[k - 1] = {shunt::detail::checked_mul(levels[k - 1].count, levels[k].count),
                                         levels[k].stride};
                        levels.erase(levels.begin() + static_cast<std::ptrdiff_t>(k));
                        changed = true;
                    }
                }
                if (blocks.size() == 1 && !levels.empty() && levels.back().stride == blocks[0].length) {
                    blocks[0].length = shunt::detail::checked_mul(blocks[0].length, levels.back().count);
                    levels.pop_back();
                    changed = true;
                }
            }
        } else {
            blocks.clear();
        }
        desc_.ndims = static_cast<std::int64_t>(levels.size());
        desc_.nblocks = static_cast<std::int64_t>(blocks.size());
        table_.resize(static_cast<std::size_t>(desc_table_size(desc_.ndims, desc_.nblocks)));
        std::int64_t align = 0, bytes = 0;
        std::int64_t* offsets = table_.data() + 3 * desc_.ndims;
        std::int64_t* prefix = offsets + desc_.nblocks;
        prefix[0] = 0;
        for (std::size_t b = 0; b < blocks.size(); ++b) {
            offsets[b] = blocks[b].offset;
            bytes = shunt::detail::checked_add(bytes, blocks[b].length);
            prefix[b + 1] = bytes;
            align |= blocks[b].offset | blocks[b].length;
        }
        desc_.block_bytes = bytes;
        std::int64_t inner = bytes;
        for (std::size_t k = levels.size(); k-- > 0;) {
            table_[3 * k] = levels[k].count;
            table_[3 * k + 1] = levels[k].stride;
            table_[3 * k + 2] = inner;
            inner = shunt::detail::checked_mul(inner, levels[k].count);
            align |= levels[k].stride;
        }
        desc_.total = blocks.empty() ? 0 : inner;
        desc_.elem_size = empty ? 0 : form.size();
        desc_.extent = extent;
        desc_.count = count;
        desc_.single_offset = blocks.empty() ? 0 : blocks[0].offset;
        desc_.align = align;
        desc_.table = table_.data();
    }
    flat_form(const flat_form& o) : table_(o.table_), desc_(o.desc_) { desc_.table = table_.data(); }
    flat_form& operator=(const flat_form& o) {
        table_ = o.table_;
        desc_ = o.desc_;
        desc_.table = table_.data();
        return *this;
    }

    /// The descriptor, its table in host memory (valid while this object lives).
    const pack_desc& desc() const { return desc_; }
    /// The table, to copy to device memory (a device descriptor is desc() with `table` replaced).
    std::span<const std::int64_t> table() const { return table_; }
    /// True when the packed stream is one contiguous run of typed bytes (a plain copy).
    bool contiguous() const { return desc_.ndims == 0 && desc_.nblocks == 1; }

private:
    std::vector<std::int64_t> table_;
    pack_desc desc_;
};

/// Plans a fused launch over items whose desc, typed and packed fields are set (each packs its
/// whole stream): sets each item's window and word, drops empty items, and gives each enough
/// launch blocks of `block_threads` threads for its words, at most `max_blocks_per_item`
/// (they stride over the rest). Returns the launch blocks in all.
inline std::int64_t plan_fused(std::vector<fused_item>& items, std::int64_t block_threads,
                               std::int64_t max_blocks_per_item) {
    std::erase_if(items, [](const fused_item& it) { return it.desc.total <= 0; });
    std::int64_t blocks = 0;
    for (auto& it : items) {
        it.win = {0, it.desc.total};
        it.word = word_size(it.desc, it.typed, reinterpret_cast<std::uintptr_t>(it.packed), it.win);
        const std::int64_t words = it.win.bytes / it.word;
        it.block_begin = blocks;
        blocks += std::min((words + block_threads - 1) / block_threads, max_blocks_per_item);
    }
    return blocks;
}

}  // namespace shunt::gpu
