package errors

import stderrors "errors"

// Is reports whether any error in err's tree matches target (errors.Is).
func Is(err, target error) bool { return stderrors.Is(err, target) }

// As finds the first error in err's tree that matches target (errors.As).
func As(err error, target any) bool { return stderrors.As(err, target) }

// Unwrap returns the result of calling the Unwrap method on err (errors.Unwrap).
func Unwrap(err error) error { return stderrors.Unwrap(err) }

// Join returns an error that wraps the given errors (errors.Join).
func Join(errs ...error) error { return stderrors.Join(errs...) }

// New returns an error whose Error method returns text (errors.New).
func New(text string) error { return stderrors.New(text) }

// AsType finds the first error in err's tree of type E (errors.AsType).
func AsType[E error](err error) (E, bool) { return stderrors.AsType[E](err) }
