// Encoding and decoding of the leader's control messages: see control_protocol.h.
#include "runtime/parallel/control_protocol.h"

#include <bit>
#include <iterator>
#include <type_traits>

#include "core/error.h"
#include "runtime/parallel/wire.h"

namespace dsv4::parallel {
namespace {

// The wire tags: fixed numbers, independent of the order of the variant's alternatives.
enum class Tag : uint8_t {
    kNewSequence = 1,
    kCopySequence = 2,
    kRelease = 3,
    kForward = 4,
    kForwardBatch = 5,
    kForwardBlock = 6,
    kControl = 7,
    kEnd = 8,
};

class Writer : public LittleEndianWriter {
  public:
    void i64(int64_t v) { u64(uint64_t(v)); }
    void flag(bool v) { u8(v ? 1 : 0); }
    void count(size_t n) {
        DSV4_CHECK(n <= UINT32_MAX, "a control message vector of {} elements is too long", n);
        u32(uint32_t(n));
    }
    void ints(const std::vector<int32_t>& v) {
        count(v.size());
        for (int32_t x : v) u32(uint32_t(x));
    }
    void floats(const std::vector<float>& v) {
        count(v.size());
        for (float x : v) u32(std::bit_cast<uint32_t>(x));
    }
    void string(const std::string& s) {
        count(s.size());
        raw({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
    }
    std::vector<uint8_t> take() { return std::move(bytes_); }
};

class Reader {
  public:
    explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

    uint8_t u8() { return uint8_t(take(1)); }
    uint32_t u32() { return uint32_t(take(4)); }
    uint64_t u64() { return take(8); }
    int64_t i64() { return int64_t(u64()); }
    bool flag() {
        const uint8_t v = u8();
        if (v > 1) malformed("a flag holds {}, not 0 or 1", v);
        return v == 1;
    }
    // A u32 count of elements of `size` bytes each, checked against the bytes left before anything is allocated.
    size_t count(size_t size) {
        const size_t n = u32();
        if (n > left() / size)
            malformed("truncated: a vector of {} elements of {} bytes, but {} bytes are left", n, size, left());
        return n;
    }
    std::vector<int32_t> ints() {
        std::vector<int32_t> v(count(4));
        for (int32_t& x : v) x = int32_t(u32());
        return v;
    }
    std::vector<float> floats() {
        std::vector<float> v(count(4));
        for (float& x : v) x = std::bit_cast<float>(u32());
        return v;
    }
    std::string string() {
        const size_t n = count(1);
        std::string s(reinterpret_cast<const char*>(bytes_.data() + offset_), n);
        offset_ += n;
        return s;
    }
    size_t left() const { return bytes_.size() - offset_; }

    template <typename... Args>
    [[noreturn]] void malformed(fmt::format_string<Args...> format, Args&&... args) const {
        fail("malformed control message from the leader ({} bytes): {}: a bug, or ranks running different dsv4 builds",
             bytes_.size(), fmt::format(format, std::forward<Args>(args)...));
    }

  private:
    uint64_t take(size_t n) {
        if (left() < n) malformed("truncated: {} more bytes needed at offset {}, {} left", n, offset_, left());
        uint64_t v = 0;
        for (size_t i = 0; i < n; ++i) v |= uint64_t(bytes_[offset_ + i]) << (8 * i);
        offset_ += n;
        return v;
    }

    std::span<const uint8_t> bytes_;
    size_t offset_ = 0;
};

void write_forward(Writer& w, const message::Forward& m) {
    w.u64(m.id);
    w.i64(m.position);
    w.flag(m.all_logits);
    w.ints(m.ids);
}

message::Forward read_forward(Reader& r) {
    message::Forward m;
    m.id = r.u64();
    m.position = r.i64();
    m.all_logits = r.flag();
    m.ids = r.ints();
    return m;
}

}  // namespace

std::vector<uint8_t> encode(const ControlMessage& message) {
    Writer w;
    w.u8(kControlProtocolVersion);
    std::visit(
        [&w](const auto& m) {
            using T = std::decay_t<decltype(m)>;
            if constexpr (std::is_same_v<T, message::NewSequence>) {
                w.u8(uint8_t(Tag::kNewSequence));
                w.u64(m.id);
            } else if constexpr (std::is_same_v<T, message::CopySequence>) {
                w.u8(uint8_t(Tag::kCopySequence));
                w.u64(m.id);
                w.u64(m.source);
                w.i64(m.position);
            } else if constexpr (std::is_same_v<T, message::Release>) {
                w.u8(uint8_t(Tag::kRelease));
                w.u64(m.id);
            } else if constexpr (std::is_same_v<T, message::Forward>) {
                w.u8(uint8_t(Tag::kForward));
                write_forward(w, m);
            } else if constexpr (std::is_same_v<T, message::ForwardBatch>) {
                w.u8(uint8_t(Tag::kForwardBatch));
                w.count(m.items.size());
                for (const message::Forward& item : m.items) write_forward(w, item);
            } else if constexpr (std::is_same_v<T, message::ForwardBlock>) {
                w.u8(uint8_t(Tag::kForwardBlock));
                w.u64(m.id);
                w.i64(m.position);
                w.i64(m.layer);
                w.i64(m.start_position);
                w.ints(m.ids);
                w.floats(m.streams_in);
            } else if constexpr (std::is_same_v<T, message::Control>) {
                w.u8(uint8_t(Tag::kControl));
                w.string(m.name);
                w.i64(m.value);
            } else {
                static_assert(std::is_same_v<T, message::End>);
                w.u8(uint8_t(Tag::kEnd));
            }
        },
        message);
    return w.take();
}

ControlMessage decode(std::span<const uint8_t> bytes) {
    Reader r(bytes);
    const uint8_t version = r.u8();
    DSV4_CHECK(version == kControlProtocolVersion,
               "the leader speaks control protocol version {}, this rank version {}: run the same dsv4 build on "
               "every rank",
               version, kControlProtocolVersion);
    const uint8_t tag = r.u8();
    ControlMessage out;
    switch (Tag(tag)) {
        case Tag::kNewSequence:
            out = message::NewSequence{r.u64()};
            break;
        case Tag::kCopySequence: {
            message::CopySequence m;
            m.id = r.u64();
            m.source = r.u64();
            m.position = r.i64();
            out = m;
            break;
        }
        case Tag::kRelease:
            out = message::Release{r.u64()};
            break;
        case Tag::kForward:
            out = read_forward(r);
            break;
        case Tag::kForwardBatch: {
            message::ForwardBatch m;
            // An item takes at least 21 bytes (id, position, flag, count): bounds the count before reserving.
            m.items.resize(r.count(21));
            for (message::Forward& item : m.items) item = read_forward(r);
            out = std::move(m);
            break;
        }
        case Tag::kForwardBlock: {
            message::ForwardBlock m;
            m.id = r.u64();
            m.position = r.i64();
            m.layer = r.i64();
            m.start_position = r.i64();
            m.ids = r.ints();
            m.streams_in = r.floats();
            out = std::move(m);
            break;
        }
        case Tag::kControl: {
            message::Control m;
            m.name = r.string();
            m.value = r.i64();
            out = std::move(m);
            break;
        }
        case Tag::kEnd:
            out = message::End{};
            break;
        default:
            r.malformed("unknown message type {}", tag);
    }
    if (r.left() != 0) r.malformed("{} bytes left over after a {} message", r.left(), message_name(out));
    return out;
}

const char* message_name(const ControlMessage& message) {
    static constexpr const char* kNames[] = {"new_sequence",  "copy_sequence", "release", "forward",
                                             "forward_batch", "forward_block", "control", "end"};
    static_assert(std::size(kNames) == std::variant_size_v<ControlMessage>);
    return kNames[message.index()];
}

}  // namespace dsv4::parallel
