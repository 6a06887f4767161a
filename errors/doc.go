// Package errors holds kepoch's error identities and classification.
//
// It forwards the standard library's Is, As, Unwrap, Join and New, so a
// kepoch file imports this package instead of the standard one. It owns the
// Kafka error code values, the truncation and partition error types, and
// IsRetriable with its documented table. It imports nothing from kepoch.
package errors
