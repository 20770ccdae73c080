// Package cputime reads the CPU time this process has used, for the rates
// that are normalised by it (tokens per CPU-second, cores busy): a
// measurement takes Process() before and after and divides by the
// difference.
package cputime
