package format

// MaxModelBytes is the memory ceiling LlamaConfig.CheckMemory holds a
// model's float32 weights to: the machine's physical memory (64 GiB where
// it cannot be read). Loading takes more than the weights (the file's own
// bytes are read too), so a model near the ceiling may still not fit; one
// above it certainly does not, and is refused before any allocation
// instead of ending in Go's "fatal error: out of memory".
var MaxModelBytes = physicalMemory()

const fallbackMemory = 64 << 30
