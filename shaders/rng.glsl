// Counter-based random numbers: a uniform in [0, 1) is a pure function of (seed, position, stream), so a
// run is reproducible however work is batched and nothing carries generator state between dispatches.
// Three rounds of a 32-bit avalanche hash (lowbias32 by Chris Wellons) over the mixed key.
uint hash32(uint x) {
  x ^= x >> 16; x *= 0x7feb352du;
  x ^= x >> 15; x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// 24 random bits: exactly representable as a float, and u < 1 always.
float counter_uniform(uvec2 seed, uint position, uint stream) {
  uint h = hash32(seed.x ^ 0x9e3779b9u);
  h = hash32(h ^ seed.y ^ 0x85ebca6bu);
  h = hash32(h ^ position * 0xc2b2ae35u);
  h = hash32(h ^ stream * 0x27d4eb2fu);
  return float(h >> 8) * (1.0 / 16777216.0);
}
