// Factories of the built-in ops, one per registry name; op.cc lists them in its table. Each reads
// its parameters through the ParamReader (which MakeOp then finishes) and returns the op.
// `Op` is only declared here: op.cc includes this header, so including op.h would make the two
// include each other.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transform/params.h"
#include "transform/value.h"

namespace stoker::transform {
class Op;
}  // namespace stoker::transform

namespace stoker::transform::internal {

using OpFactory = Result<std::unique_ptr<Op>> (*)(ParamReader* params);

// image_ops.cc
Result<std::unique_ptr<Op>> MakeDecodeImage(ParamReader* params);
Result<std::unique_ptr<Op>> MakeResize(ParamReader* params);
Result<std::unique_ptr<Op>> MakeCenterCrop(ParamReader* params);
Result<std::unique_ptr<Op>> MakeRandomCrop(ParamReader* params);
Result<std::unique_ptr<Op>> MakeRandomResizedCrop(ParamReader* params);
Result<std::unique_ptr<Op>> MakeHorizontalFlip(ParamReader* params);
Result<std::unique_ptr<Op>> MakeVerticalFlip(ParamReader* params);
Result<std::unique_ptr<Op>> MakePad(ParamReader* params);
Result<std::unique_ptr<Op>> MakeNormalize(ParamReader* params);
Result<std::unique_ptr<Op>> MakeToChw(ParamReader* params);

/// decode_image at `first` with the resize, center_crop + resize or random_resized_crop after it,
/// as one op that may decode a JPEG at a reduced size (image_ops.cc); nullptr when the ops there do
/// not fuse. `*count` is the number of ops it stands for. It keeps pointers into `ops`.
std::unique_ptr<Op> FuseImageOps(const std::vector<std::unique_ptr<Op>>& ops, size_t first,
                                 size_t* count);

// array_ops.cc
Result<std::unique_ptr<Op>> MakeDecodeNpy(ParamReader* params);
Result<std::unique_ptr<Op>> MakeDecodeNpz(ParamReader* params);
Result<std::unique_ptr<Op>> MakeReinterpret(ParamReader* params);
Result<std::unique_ptr<Op>> MakeShape(ParamReader* params);

// feature_ops.cc
Result<std::unique_ptr<Op>> MakeCast(ParamReader* params);
Result<std::unique_ptr<Op>> MakeClip(ParamReader* params);
Result<std::unique_ptr<Op>> MakeLog1p(ParamReader* params);
Result<std::unique_ptr<Op>> MakeStandardize(ParamReader* params);
Result<std::unique_ptr<Op>> MakeMinMax(ParamReader* params);
Result<std::unique_ptr<Op>> MakeBucketize(ParamReader* params);
Result<std::unique_ptr<Op>> MakeHashBucket(ParamReader* params);
Result<std::unique_ptr<Op>> MakeVocabulary(ParamReader* params);
Result<std::unique_ptr<Op>> MakeFillNull(ParamReader* params);

/// kUnsupportedType: "op 'x' needs <what>, got <type>".
Status WrongInput(const std::string& op, const std::string& what, const ValueType& got);
/// kCorruptFile with `reason` (the caller names file, row group, row and column).
Status Corrupt(const std::string& reason);
/// kUnsupportedInput with `reason`: a valid value stoker does not decode (never call it corrupt).
Status Unsupported(const std::string& reason);

}  // namespace stoker::transform::internal
