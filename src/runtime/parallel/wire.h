// Little-endian encoding shared by the rendezvous frames (tcp_group.cpp) and the control messages
// (control_protocol.cpp): each adds its own field types on top of these integers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dsv4::parallel {

class LittleEndianWriter {
  public:
    void u8(uint8_t v) { bytes_.push_back(v); }
    void u32(uint32_t v) {
        for (int i = 0; i < 4; ++i) bytes_.push_back(uint8_t(v >> (8 * i)));
    }
    void u64(uint64_t v) {
        for (int i = 0; i < 8; ++i) bytes_.push_back(uint8_t(v >> (8 * i)));
    }
    void raw(std::span<const uint8_t> b) { bytes_.insert(bytes_.end(), b.begin(), b.end()); }
    const std::vector<uint8_t>& bytes() const { return bytes_; }

  protected:
    std::vector<uint8_t> bytes_;
};

}  // namespace dsv4::parallel
