// Package safetensors reads and writes the safetensors format
// (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range,
// and the raw little-endian tensor bytes. Output chunks use it because
// Python trainers load it with one call and without pickle.
package safetensors
