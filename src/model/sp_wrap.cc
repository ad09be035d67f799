// sp_wrap.cc - the C API of sp_wrap.h over libsentencepiece (the project's only C++ file).
//
// Debian's libsentencepiece ships no sentencepiece_model.pb.h, so the
// no-dummy-prefix twin is made on the wire: the serialized ModelProto gets
// `normalizer_spec { add_dummy_prefix: false }` appended, and protobuf merges a
// repeated embedded message into the first one. Both normalizer properties are
// then checked by encoding probes rather than trusted.
#include "sp_wrap.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

struct sp_wrap {
    sentencepiece::SentencePieceProcessor with_prefix;  // the model as trained
    sentencepiece::SentencePieceProcessor no_prefix;    // add_dummy_prefix forced off
    bool adds_dummy_prefix = false;
    bool removes_extra_whitespaces = false;
};

namespace {

// ModelProto field 3 (normalizer_spec, length-delimited, 2 bytes) holding
// NormalizerSpec field 3 (add_dummy_prefix, varint) = 0.
const char kNoDummyPrefix[] = {0x1A, 0x02, 0x18, 0x00};
const char kSpace[] = "\xE2\x96\x81";  // U+2581, sentencepiece's space symbol

void set_err(char *err, size_t cap, const char *msg, const std::string &detail) {
    if (err && cap) std::snprintf(err, cap, "%s%s", msg, detail.c_str());
}

// The pieces `text` encodes to, joined into one string.
std::string joined_pieces(const sentencepiece::SentencePieceProcessor &p, const char *text) {
    std::vector<std::string> pieces;
    if (!p.Encode(text, &pieces).ok()) return std::string();
    std::string out;
    for (const auto &s : pieces) out += s;
    return out;
}

bool starts_with_space(const std::string &s) { return s.compare(0, 3, kSpace) == 0; }

}  // namespace

extern "C" sp_wrap_t *sp_wrap_load(const char *path, char *err, size_t err_cap) {
    try {
        std::unique_ptr<sp_wrap> sp(new sp_wrap);
        auto st = sp->with_prefix.Load(path);
        if (!st.ok()) {
            set_err(err, err_cap, "sentencepiece: ", st.ToString());
            return nullptr;
        }
        std::string proto = sp->with_prefix.serialized_model_proto();
        proto.append(kNoDummyPrefix, sizeof kNoDummyPrefix);
        st = sp->no_prefix.LoadFromSerializedProto(proto);
        if (!st.ok()) {
            set_err(err, err_cap, "sentencepiece (no-dummy-prefix copy): ", st.ToString());
            return nullptr;
        }
        // "a" encodes to "▁a" pieces exactly when a dummy prefix is added.
        sp->adds_dummy_prefix = starts_with_space(joined_pieces(sp->with_prefix, "a"));
        if (starts_with_space(joined_pieces(sp->no_prefix, "a"))) {
            set_err(err, err_cap, "sentencepiece: could not turn off add_dummy_prefix", "");
            return nullptr;
        }
        // Two spaces survive unless the normalizer collapses them.
        std::string probe = joined_pieces(sp->no_prefix, "a  b");
        sp->removes_extra_whitespaces = probe.find("\xE2\x96\x81\xE2\x96\x81") == std::string::npos;
        return sp.release();
    } catch (const std::exception &e) {
        set_err(err, err_cap, "sentencepiece: ", e.what());
    } catch (...) {
        set_err(err, err_cap, "sentencepiece: unknown error", "");
    }
    return nullptr;
}

extern "C" void sp_wrap_free(sp_wrap_t *sp) { delete sp; }

extern "C" int32_t sp_wrap_piece_count(const sp_wrap_t *sp) {
    return sp->with_prefix.GetPieceSize();
}
extern "C" int32_t sp_wrap_bos_id(const sp_wrap_t *sp) { return sp->with_prefix.bos_id(); }
extern "C" int32_t sp_wrap_eos_id(const sp_wrap_t *sp) { return sp->with_prefix.eos_id(); }
extern "C" int32_t sp_wrap_unk_id(const sp_wrap_t *sp) { return sp->with_prefix.unk_id(); }

extern "C" sp_piece_type_t sp_wrap_piece_type(const sp_wrap_t *sp, int32_t id) {
    const auto &p = sp->with_prefix;
    if (id < 0 || id >= p.GetPieceSize()) return SP_PIECE_UNUSED;
    if (p.IsByte(id)) return SP_PIECE_BYTE;
    if (p.IsControl(id)) return SP_PIECE_CONTROL;
    if (p.IsUnknown(id)) return SP_PIECE_UNKNOWN;
    if (p.IsUnused(id)) return SP_PIECE_UNUSED;
    return SP_PIECE_NORMAL;
}

extern "C" const char *sp_wrap_piece(const sp_wrap_t *sp, int32_t id, size_t *len) {
    try {
        if (id < 0 || id >= sp->with_prefix.GetPieceSize()) return nullptr;
        const std::string &s = sp->with_prefix.IdToPiece(id);  // lives in the model proto
        *len = s.size();
        return s.c_str();
    } catch (...) {
        return nullptr;
    }
}

extern "C" int32_t sp_wrap_piece_to_id(const sp_wrap_t *sp, const char *piece, size_t len) {
    try {
        std::string_view v(piece, len);
        int id = sp->with_prefix.PieceToId(v);
        if (id < 0) return -1;
        // PieceToId answers the unknown id for strings it does not know.
        if (id == sp->with_prefix.unk_id() && sp->with_prefix.IdToPiece(id) != v) return -1;
        return id;
    } catch (...) {
        return -1;
    }
}

extern "C" bool sp_wrap_adds_dummy_prefix(const sp_wrap_t *sp) { return sp->adds_dummy_prefix; }
extern "C" bool sp_wrap_removes_extra_whitespaces(const sp_wrap_t *sp) {
    return sp->removes_extra_whitespaces;
}

extern "C" int sp_wrap_encode(const sp_wrap_t *sp, bool dummy_prefix, const char *text, size_t len,
                              int32_t **ids_out, size_t *n_out) {
    *ids_out = nullptr;
    *n_out = 0;
    try {
        std::vector<int> ids;
        const auto &p = dummy_prefix ? sp->with_prefix : sp->no_prefix;
        if (!p.Encode(std::string_view(text, len), &ids).ok()) return -1;
        if (ids.empty()) return 0;
        auto *out = static_cast<int32_t *>(std::malloc(ids.size() * sizeof(int32_t)));
        if (!out) return -1;
        for (size_t i = 0; i < ids.size(); i++) out[i] = ids[i];
        *ids_out = out;
        *n_out = ids.size();
        return 0;
    } catch (...) {
        return -1;
    }
}
