// Package logging builds the daemon's zap logger and routes client-go's klog output through it, so that
// every line the process writes is structured the same way.
package logging

import (
	"fmt"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// New returns a zap logger writing to stderr in format "json" or "console" at level "debug", "info",
// "warn" or "error", and makes it klog's sink.
func New(format, level string) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	var cfg zap.Config
	switch format {
	case "json":
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "ts"
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	case "console":
		cfg = zap.NewDevelopmentConfig()
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
	default:
		return nil, fmt.Errorf("log format %q: must be json or console", format)
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	// Sampling would drop repeated reconcile lines that an operator needs to follow a stall.
	cfg.Sampling = nil
	cfg.DisableStacktrace = true
	log, err := cfg.Build()
	if err != nil {
		return nil, err
	}
	klog.SetLogger(zapr.NewLogger(log.WithOptions(zap.AddCallerSkip(0))).WithName("klog"))
	return log, nil
}
