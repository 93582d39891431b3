// CheckShardSet: the MG-SET-* findings of an index against its shards
// (the rules are core::ShardSetErrors').
#include "modelgate/scanner.h"

namespace modelgate::scanner {

std::vector<Finding> CheckShardSet(const core::ShardIndex& index, const core::ShardHeaders& shards) {
  std::vector<Finding> out;
  for (const core::Error& e : core::ShardSetErrors(index, shards)) out.push_back(FindingFromError(e));
  return out;
}

}  // namespace modelgate::scanner
