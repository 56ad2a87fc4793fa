// xxHash (XXH3), compiled inline into each user. GCC 12.0 to 12.2 warns inside its own AVX-512
// intrinsics header wherever they are inlined ("'__Y' is used uninitialized", GCC bug 105593,
// fixed in 12.3), which xxHash's AVX-512 path does under -march=native; its AVX2 path computes
// the same hashes, so those compilers take it and the first build stays free of warnings.
#pragma once
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12 && __GNUC_MINOR__ < 3
#define XXH_VECTOR 2  // XXH_AVX2
#endif
#define XXH_INLINE_ALL
#include <xxhash.h>
