// Package pricing turns provider-reported token usage into money with exact
// integer arithmetic. Prices are configured as floats per million tokens;
// they are converted once to integer pico-units per token (which is the same
// number as micro-units per million tokens), multiplied in 128 bits and
// rounded once per request to nano-units. Sums of Money are therefore exact
// and reproducible on every replica.
package pricing
