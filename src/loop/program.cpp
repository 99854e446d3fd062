#include "coil/loop/program.h"

#include <string>

#include "coil/support/error.h"

namespace coil::loop {

std::string_view reduce_kind_name(ReduceKind k) {
  switch (k) {
    case ReduceKind::None:
      return "none";
#define COIL_REDUCE_NAME(name, text) \
  case ReduceKind::name:             \
    return text;
      COIL_REDUCE_KINDS(COIL_REDUCE_NAME)
#undef COIL_REDUCE_NAME
  }
  return "?";
}

std::string_view extern_kind_name(ExternKind k) {
  switch (k) {
#define COIL_EXTERN_NAME(name, text) \
  case ExternKind::name:             \
    return text;
    COIL_EXTERN_KINDS(COIL_EXTERN_NAME)
#undef COIL_EXTERN_NAME
  }
  return "?";
}

BufferId LoopProgram::add_buffer(Buffer b) {
  b.id = static_cast<BufferId>(buffers.size());
  if (b.kind == BufferKind::Input) {
    b.name = "in" + std::to_string(b.input_index);
  } else {
    b.name = "buf" + std::to_string(b.id);
  }
  buffers.push_back(std::move(b));
  return buffers.back().id;
}

BufferId storage_root(const LoopProgram& p, BufferId id) {
  int guard = 0;
  while (p.buffer(id).kind == BufferKind::View) {
    id = p.buffer(id).view_of;
    COIL_CHECK(id >= 0 && ++guard < 1000) << "view without a base";
  }
  return id;
}

std::set<BufferId> written_through_alias(const LoopProgram& p, const std::set<BufferId>& buffers,
                                         const std::set<BufferId>& written) {
  std::set<BufferId> out;
  for (BufferId a : buffers) {
    for (BufferId b : buffers) {
      if (a != b && storage_root(p, a) == storage_root(p, b) &&
          (written.count(a) || written.count(b)))
        out.insert(a);
    }
  }
  return out;
}

}  // namespace coil::loop
