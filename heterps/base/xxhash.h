// xxHash, every function inlined into the including file (XXH_INLINE_ALL).
//
// GCC before 13 reports the undefined vectors of its own AVX-512 intrinsics as used uninitialized
// (its bug 105593), and xxHash's AVX-512 path inlines them into ours: with AVX-512 on such a
// compiler, xxHash takes its AVX2 path instead (the same hashes, a little slower on long inputs).
#pragma once

#define XXH_INLINE_ALL
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#define XXH_VECTOR XXH_AVX2
#endif
#include <xxhash.h>
