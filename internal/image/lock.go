package image

import (
	"context"
	"os"
	"sync"
	"time"
)

// fileLock is an advisory lock (flock) held on an open lock file. Lock files
// may be removed by whoever holds them exclusively (eviction, a failed first
// download), so acquiring a lock checks that the file locked is still the
// one at the path, and retries otherwise.
type fileLock struct {
	f    *os.File
	dir  fileDir
	name string
	once sync.Once
}

// Lock polling: flock has no timeout or cancellation, so waits poll a
// non-blocking lock with a growing delay, checking the context in between.
const (
	lockPollInitial = 2 * time.Millisecond
	lockPollMax     = 100 * time.Millisecond
)

// acquireLock opens (creating it if needed) the lock file at path and locks
// it, shared or exclusive, waiting until it can or ctx is done.
func acquireLock(ctx context.Context, dir fileDir, name string, exclusive bool) (*fileLock, error) {
	for {
		f, err := dir.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		if err := waitLock(ctx, f, exclusive); err != nil {
			f.Close()
			return nil, err
		}
		if lockFileCurrent(f, dir, name) {
			return &fileLock{f: f, dir: dir, name: name}, nil
		}
		f.Close() // removed or replaced while we waited: lock the new one
	}
}

// tryAcquireLock locks the lock file at path exclusively if nobody holds it,
// returning nil (and no error) when somebody does.
func tryAcquireLock(dir fileDir, name string) (*fileLock, error) {
	f, err := dir.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	ok, err := tryLockFile(f, true)
	if err != nil || !ok || !lockFileCurrent(f, dir, name) {
		f.Close()
		return nil, err
	}
	return &fileLock{f: f, dir: dir, name: name}, nil
}

// relock changes the lock to shared or exclusive, waiting as acquireLock
// does. The change is not atomic: others may hold the lock in between, so
// callers re-examine what the lock protects. It reports false (and releases
// the lock) when the lock file was removed meanwhile; the caller must then
// acquire it anew.
func (l *fileLock) relock(ctx context.Context, exclusive bool) (bool, error) {
	if err := waitLock(ctx, l.f, exclusive); err != nil {
		l.release()
		return false, err
	}
	if !lockFileCurrent(l.f, l.dir, l.name) {
		l.release()
		return false, nil
	}
	return true, nil
}

// remove deletes the lock file; the caller must hold it exclusively and
// release it next.
func (l *fileLock) remove() { _ = l.dir.Remove(l.name) }

// release unlocks and closes the lock file; it is idempotent.
func (l *fileLock) release() {
	l.once.Do(func() {
		_ = unlockFile(l.f) // closing the file releases the lock anyway
		l.f.Close()
	})
}

// waitLock takes the lock on f, polling until it succeeds or ctx is done.
func waitLock(ctx context.Context, f *os.File, exclusive bool) error {
	delay := lockPollInitial
	for {
		ok, err := tryLockFile(f, exclusive)
		if err != nil || ok {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, lockPollMax)
	}
}

// lockFileCurrent reports whether f is still the file name in dir.
func lockFileCurrent(f *os.File, dir fileDir, name string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := dir.Stat(name)
	return err == nil && os.SameFile(a, b)
}

// keyMutexes serialise, within this process, the Fetches of one cache entry
// (flock alone would too, but goroutines would then poll for it).
var keyMutexes = struct {
	sync.Mutex
	m map[string]*keyMutex
}{m: map[string]*keyMutex{}}

type keyMutex struct {
	ch   chan struct{}
	refs int
}

// lockKey takes the in-process mutex for id, waiting until it can or ctx is
// done, and returns the function that releases it.
func lockKey(ctx context.Context, id string) (func(), error) {
	keyMutexes.Lock()
	km := keyMutexes.m[id]
	if km == nil {
		km = &keyMutex{ch: make(chan struct{}, 1)}
		keyMutexes.m[id] = km
	}
	km.refs++
	keyMutexes.Unlock()
	drop := func() {
		keyMutexes.Lock()
		if km.refs--; km.refs == 0 {
			delete(keyMutexes.m, id)
		}
		keyMutexes.Unlock()
	}
	select {
	case km.ch <- struct{}{}:
	case <-ctx.Done():
		drop()
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-km.ch
			drop()
		})
	}, nil
}
