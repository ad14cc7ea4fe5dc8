// Package demand holds a reader's signals of demand, beside the rest of
// traineragent: the stall window between two demand signals (StallWindow,
// rolled into a wire.Demand), the ranks' step reports and their split into
// wait, compute and other time (StepBook), and the GPU's utilisation
// averaged over each window (GPUMeter, read through a GPUSampler such as
// OpenNVML's). Its values are plain and take times as arguments, but for
// GPUMeter, whose lock is a leaf of the agent's lock order.
package demand
