// joblib's NumpyUnpickler reading, inside the pickle machine.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <initializer_list>
#include <vector>

#include "numpy_dtype.h"
#include "pickle_machine.h"

namespace modelgate::scanner::pickle_internal {

// --- joblib ------------------------------------------------------------------
// joblib.load unpickles with NumpyUnpickler, whose load_build, after the
// ordinary BUILD, replaces a NumpyArrayWrapper on the stack by
// wrapper.read(unpickler), which reads the array from the file right there
// (reference: joblib/numpy_pickle.py, joblib 1.2):
//   read_array: count = 1 if len(self.shape) == 0 else
//                 np.multiply.reduce([np.int64(x) for x in self.shape])
//     if self.dtype.hasobject: array = pickle.load(unpickler.file_handle)
//     else:
//       if safe_get_numpy_array_alignment_bytes() is not None:   # getattr(..., None)
//         padding_length = int.from_bytes(file_handle.read(1), 'little')
//         if padding_length != 0: file_handle.read(padding_length)
//       max_read_count = BUFFER_SIZE // min(BUFFER_SIZE, self.dtype.itemsize)
//       ... _read_bytes(file_handle, read_count * self.dtype.itemsize) ...
//       if self.order == 'F': ... (then read() checks self.subclass)
//   read_mmap (mmap_mode, allow_mmap) seeks past the same bytes:
//     offset += padding_length + 1; seek(offset + marray.nbytes).
// NDArrayWrapper (joblib < 0.10, and its subclass ZNDArrayWrapper) read a
// separate file instead: no bytes follow in this one.

// JoblibHazard: a name whose presence in the instance changes how the
// wrapper behaves (a dunder, or one of its method names): not followed.
bool JoblibHazard(std::string_view k) {
  return (k.size() >= 2 && k.substr(0, 2) == "__") || k == "read" || k == "read_array" ||
         k == "read_mmap" || k == "write_array" || k == "safe_get_numpy_array_alignment_bytes";
}
// JoblibKey: a dict key the read above can see, or a hazard.
bool JoblibKey(std::string_view k) {
  return JoblibHazard(k) || k == "shape" || k == "dtype" || k == "order" || k == "subclass" ||
         k == "numpy_array_alignment_bytes" || k == "allow_mmap" || k == "filename";
}


void MarkUnknown(Value& v, std::string why) {
  if (v.x().unknown.empty()) v.x().unknown = std::move(why);
}

void PutAttr(Value& obj, Attr a) {
  std::vector<Attr>& attrs = obj.x().attrs;
  for (Attr& e : attrs) {
    if (e.name == a.name) {
      e = std::move(a);
      return;
    }
  }
  if (attrs.size() >= kKeptItems) {
    MarkUnknown(obj, "more than " + U64(kKeptItems) + " of its names are set");
    return;
  }
  attrs.push_back(std::move(a));
}

void Machine::SetAttr(Value& obj, std::string_view name, const Ref& value) {
  Attr a;
  a.name = std::string(name);
  a.kind = value->kind;
  // Held only when it holds no references itself: no cycles.
  bool ints = value->kind == VKind::kTuple && value->x().items.size() == value->count;
  for (const Ref& item : value->x().items) {
    ints &= (item->kind == VKind::kInt && item->int_fits) || item->kind == VKind::kBool;
  }
  if (ints || value->special == Special::kNumpyDtype || value->kind == VKind::kStr ||
      value->kind == VKind::kGlobal) {
    a.held = value;
  }
  PutAttr(obj, std::move(a));
}

void Machine::NoteEntry(Value& dict, const Value& key, const Ref& value) {
  if (key.kind == VKind::kStr) {
    if (key.truncated) {
      MarkUnknown(dict, "a key of its state was cut at max_string_bytes");
    } else if (JoblibKey(key.text())) {
      SetAttr(dict, key.text(), value);
    }
  } else if (!key.Native()) {  // an object that may compare equal to a name
    MarkUnknown(dict, "a key of its state is " + Describe(key) + ", not a literal");
  }
}

// MergeState mirrors pickle.py load_build for an instance without
// __setstate__: a (state, slotstate) pair splits; a truthy state updates
// inst.__dict__, a truthy slotstate is setattr'd item by item.
void Machine::MergeState(Value& inst, const Ref& state, const char* what) {
  const Value* st = state.get();
  const Value* slots = nullptr;
  if (st->kind == VKind::kTuple && st->count == 2) {
    if (st->x().items.size() != 2) return MarkUnknown(inst, "its BUILD state tuple is not kept");
    slots = st->x().items[1].get();
    st = st->x().items[0].get();
  }
  for (const Value* v : {st, slots}) {
    if (v == nullptr || v->kind == VKind::kNone || (v->kind == VKind::kTuple && v->count == 0)) continue;
    if (v->kind != VKind::kDict) {
      return MarkUnknown(inst, std::string("its BUILD ") + what + " is " + Describe(*v) + ", not a dict");
    }
    if (!v->x().unknown.empty()) MarkUnknown(inst, v->x().unknown);
    for (const Attr& a : v->x().attrs) PutAttr(inst, a);
  }
}

// Specialize marks the results joblib's reading depends on: instances of
// the wrappers (with the attributes __init__ gives them) and dtypes.
void Machine::Specialize(const Value& callee, const Ref& args, const Ref& kwargs, Value* result) {
  const std::string& m = callee.x().module;
  const std::string& q = callee.x().qualname;
  std::string_view op = op_name_;
  bool newobj = op == "NEWOBJ" || op == "NEWOBJ_EX";
  const Value* a = args.get();
  bool args_known = a != nullptr && a->kind == VKind::kTuple && a->x().items.size() == a->count;
  // pickle.py: NEWOBJ calls cls.__new__ (no __init__); OBJ/INST without
  // arguments too (_instantiate); REDUCE and OBJ/INST with arguments call cls(*args).
  bool init = !newobj && !(op != "REDUCE" && args_known && a->count == 0);
  if (m == "joblib.numpy_pickle" && q == "NumpyArrayWrapper") {
    result->special = Special::kJoblibWrapper;
    if (!init) return;
    if (!args_known || a->count < 4 || a->count > 6) {
      return MarkUnknown(*result, "the arguments of its __init__ are not known");
    }
    static constexpr const char* kParams[] = {"subclass", "shape", "order", "dtype", "allow_mmap",
                                              "numpy_array_alignment_bytes"};
    for (size_t i = 0; i < a->count; ++i) SetAttr(*result, kParams[i], a->x().items[i]);
    Attr d;  // defaults: allow_mmap=False, numpy_array_alignment_bytes=16
    d.name = "allow_mmap";
    d.kind = VKind::kBool;
    if (a->count < 5) PutAttr(*result, d);
    d.name = "numpy_array_alignment_bytes";
    d.kind = VKind::kInt;
    if (a->count < 6) PutAttr(*result, d);
  } else if ((m == "joblib.numpy_pickle" || m == "joblib.numpy_pickle_compat") &&
             q == "NDArrayWrapper") {
    result->special = Special::kNdArrayWrapper;
    if (init && args_known && a->count >= 1) SetAttr(*result, "filename", a->x().items[0]);
  } else if (m == "numpy" && q == "dtype") {
    result->special = Special::kNumpyDtype;
    if (kwargs && !(kwargs->kind == VKind::kDict && kwargs->count == 0)) {
      return MarkUnknown(*result, "numpy.dtype is called with keyword arguments");
    }
    if (!args_known || a->count < 1 || a->count > 4) {
      return MarkUnknown(*result, "the arguments of numpy.dtype are not known");
    }
    const Value& t = *a->x().items[0];
    if ((t.kind != VKind::kStr && t.kind != VKind::kBytes) || t.truncated) {
      return MarkUnknown(*result, "numpy.dtype is called with " + Describe(t) +
                                      ", not a typestr (structured dtypes are not followed)");
    }
    result->x().typestr = std::string(t.text());
    // copy=True makes even a builtin dtype a fresh object that a BUILD
    // state can change; its truth value must be known.
    if (a->count >= 3) {
      const Value& c = *a->x().items[2];
      if (c.kind != VKind::kNone && c.kind != VKind::kBool && c.kind != VKind::kInt) {
        return MarkUnknown(*result, "numpy.dtype's copy argument is " + Describe(c));
      }
    }
  }
}

// DtypeSetState checks a BUILD state on a numpy dtype (numpy's
// arraydescr_setstate): (version, byteorder, subarray, names, fields,
// elsize, alignment, flags[, metadata]). numpy lets it set hasobject
// (flags & 1) and, for S/U/V, the itemsize; whether it applies depends on
// the copy argument and the numpy version. So a state is accepted only
// where it agrees with the typestr, and nothing is computed from it.
void Machine::DtypeSetState(Value& dtype, const Value& st) {
  if (!dtype.x().unknown.empty()) return;
  auto int32 = [](const Value& v, int64_t* out) {
    if (!((v.kind == VKind::kInt && v.int_fits) || v.kind == VKind::kBool)) return false;
    *out = v.int_value;
    return v.int_value >= INT32_MIN && v.int_value <= INT32_MAX;
  };
  const std::vector<Ref>& it = st.x().items;
  int64_t version = 0, elsize = 0, alignment = 0, flags = 0;
  if (st.kind != VKind::kTuple || (st.count != 8 && st.count != 9) || it.size() != st.count ||
      !int32(*it[0], &version) || (version != 3 && version != 4) || it[1]->kind != VKind::kStr ||
      it[2]->kind != VKind::kNone || it[3]->kind != VKind::kNone || it[4]->kind != VKind::kNone ||
      !int32(*it[5], &elsize) || !int32(*it[6], &alignment) || !int32(*it[7], &flags)) {
    return MarkUnknown(dtype, "its BUILD state is not the plain (3|4, byteorder, None, None, None, "
                              "elsize, alignment, flags) that numpy writes for a typestr dtype");
  }
  const NumpyTypestr d = ParseNumpyTypestr(dtype.x().typestr, TypestrForm::kDtypeReduce);
  if (!d.ok) return;  // reported when a wrapper uses it
  if (((flags & 1) != 0) != d.object) {
    return MarkUnknown(dtype, "its BUILD state's flags " + std::to_string(flags) +
                                  " disagree with its typestr about object items");
  }
  if (d.flexible && static_cast<uint64_t>(elsize) != d.itemsize) {
    return MarkUnknown(dtype, "its BUILD state's elsize " + std::to_string(elsize) +
                                  " disagrees with its typestr " + Quoted(dtype.x().typestr, 40));
  }
  const std::string_view order = it[1]->text();
  dtype.x().byteorder = order.size() == 1 ? order[0] : 0;
}

// JoblibRead follows NumpyArrayWrapper.read after the BUILD at op_offset_:
// it skips the bytes joblib reads, or analyzes the nested pickle of an
// object array, then puts the array where the wrapper was.
void Machine::JoblibRead(ByteReader& r, Value& wrapper) {
  const uint64_t build_offset = op_offset_;
  if (joblib_divergence_ == kNoOffset) joblib_divergence_ = r.offset();
  auto cannot = [&](const std::string& why) {
    Fail("joblib.numpy_pickle.NumpyArrayWrapper: " + why +
         "; the bytes joblib.load reads after this BUILD cannot be computed exactly");
  };
  auto past_end = [&](uint64_t at, const std::string& what, uint64_t n, uint64_t have) {
    op_name_ = "";
    op_offset_ = at;
    Fail("joblib.load reads " + what + " of " + U64(n) + " bytes here for the NumpyArrayWrapper BUILD at " +
         U64(build_offset) + ", " + U64(have) + " remain");
  };
  if (frame_active_) {
    // pickle.py reads the rest of a frame from memory: joblib's reads come
    // from after the frame. joblib's writer always ends the frame here.
    if (r.pos() < frame_end_) {
      cannot("its data would follow the FRAME that ends at " + U64(r.offset() + (frame_end_ - r.pos())) +
             ", not this BUILD");
    }
    frame_active_ = false;
  }
  const Value::Extra& x = wrapper.x();
  if (!x.unknown.empty()) cannot(x.unknown);
  const Attr *shape = nullptr, *dtype = nullptr, *order = nullptr, *subclass = nullptr,
             *align = nullptr;
  for (const Attr& a : x.attrs) {
    if (JoblibHazard(a.name)) cannot("its state sets " + Quoted(a.name, 40));
    if (a.name == "shape") shape = &a;
    if (a.name == "dtype") dtype = &a;
    if (a.name == "order") order = &a;
    if (a.name == "subclass") subclass = &a;
    if (a.name == "numpy_array_alignment_bytes") align = &a;
  }
  if (shape == nullptr || dtype == nullptr || subclass == nullptr) {
    cannot(std::string("it has no '") + (shape == nullptr ? "shape" : dtype == nullptr ? "dtype" : "subclass") +
           "' (joblib.load raises)");
  }
  if (!shape->held) {
    cannot("its shape is " + WithArticle(KindName(shape->kind)) +
           ", not a tuple of at most " + U64(kKeptItems) + " ints");
  }
  uint64_t count = 1;  // shape (): one element
  for (const Ref& dim : shape->held->x().items) {
    if (dim->int_value < 0) cannot("its shape has the negative dimension " + std::to_string(dim->int_value));
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(dim->int_value), &count) ||
        count > static_cast<uint64_t>(INT64_MAX)) {
      cannot("the element count of its shape overflows int64");
    }
  }
  if (!dtype->held || dtype->held->special != Special::kNumpyDtype) {
    cannot("its dtype is " + WithArticle(KindName(dtype->kind)) + ", not the result of numpy.dtype");
  }
  const Value& dt = *dtype->held;
  if (!dt.x().unknown.empty()) cannot("its dtype: " + dt.x().unknown);
  const NumpyTypestr ds = ParseNumpyTypestr(dt.x().typestr, TypestrForm::kDtypeReduce);
  if (!ds.ok) cannot(ds.why);

  PickleArray rec;
  rec.build_offset = build_offset;
  rec.offset = r.offset();
  rec.stream = static_cast<uint32_t>(stream_index_);
  if (ds.object) {
    // pickle.load(unpickler.file_handle): the C unpickler on the same file,
    // which it leaves just past the nested STOP.
    if (depth_ + 1 > lim_.max_nesting) {
      LimitHit("max_nesting", lim_.max_nesting, " at a joblib object array");
    }
    const uint64_t at = r.offset();
    const size_t inner_index = out_->streams.size();
    const size_t saved_stream = stream_index_;
    Machine inner(opt_, out_, rec_, depth_ + 1, build_offset, false);
    inner.RunStreams(r.Peek(r.remaining()), at, 1, false);
    stream_index_ = saved_stream;
    op_name_ = "BUILD";
    op_offset_ = build_offset;
    const PickleStream& ns = out_->streams[inner_index];
    if (!ns.complete) {
      Fail("the pickle of the object array at " + U64(at) + " does not complete, so joblib.load fails here");
    }
    rec.object_pickle = true;
    rec.nested_stream = static_cast<uint32_t>(inner_index);
    rec.data_bytes = ns.end - at;
    Take(r, rec.data_bytes);
  } else {
    if (order == nullptr) cannot("it has no 'order' (joblib.load raises after reading)");
    if (align != nullptr && (align->kind == VKind::kResult || align->kind == VKind::kPersistent)) {
      cannot("whether its numpy_array_alignment_bytes is None is not known");
    }
    if (align != nullptr && align->kind != VKind::kNone) {
      if (r.remaining() < 1) past_end(r.offset(), "the padding-length byte", 1, 0);
      uint64_t pad = r.Peek(1)[0];
      if (pad > r.remaining() - 1) past_end(r.offset() + 1, "alignment padding", pad, r.remaining() - 1);
      rec.padding_bytes = 1 + pad;
    }
    // BUFFER_SIZE // min(BUFFER_SIZE, itemsize) divides by zero.
    if (ds.itemsize == 0) cannot("its dtype's itemsize is 0 (joblib.load fails)");
    uint64_t n = 0;
    if (__builtin_mul_overflow(count, ds.itemsize, &n) || n > static_cast<uint64_t>(INT64_MAX)) {
      cannot("its byte count (" + U64(count) + " elements of " + U64(ds.itemsize) + " bytes) overflows int64");
    }
    uint64_t have = r.remaining() - rec.padding_bytes;
    if (n > have) past_end(r.offset() + rec.padding_bytes, "array data", n, have);
    Take(r, rec.padding_bytes);
    Take(r, n);
    rec.data_bytes = n;
  }
  rec_->Array(rec);
  Ref array = Make(VKind::kResult);  // the wrapper's place: the array it read
  array->x().callee = "joblib.numpy_pickle.NumpyArrayWrapper.read";
  array->callee_safe = true;
  if (graph_) {
    auto facts = std::make_shared<PickleJoblibArray>();
    facts->offset = rec.offset + rec.padding_bytes;
    facts->bytes = rec.data_bytes;
    facts->typestr = dt.x().typestr;
    facts->byteorder = dt.x().byteorder;
    for (const Ref& dim : shape->held->x().items) facts->shape.push_back(static_cast<uint64_t>(dim->int_value));
    if (order != nullptr && order->held && order->held->kind == VKind::kStr) {
      facts->order = std::string(order->held->text());
    }
    if (subclass->held && subclass->held->kind == VKind::kGlobal) {
      facts->subclass = subclass->held->x().module + "." + subclass->held->x().qualname;
    }
    facts->object = ds.object;
    array->origin_offset = build_offset;
    array->x().joblib_array = std::move(facts);
  }
  stack_.back() = std::move(array);
}

}  // namespace modelgate::scanner::pickle_internal
