//! A key opened through the raw API, for the duration of a callback, closed on drop, with the
//! type checks every command needs. Only `store.rs` opens keys: it files what it stores in the
//! reclaim index, which this layer knows nothing of.

use std::ffi::c_int;
use std::marker::PhantomData;

use redis_module::raw;

use super::datatype::LOCK_TYPE;
use super::{Call, KeyName};
use crate::error::LockError;
use crate::lock::Lock;

const READ_WRITE: u32 = raw::REDISMODULE_READ | raw::REDISMODULE_WRITE;

/// Borrows the `Call` or `Timer` it was opened in, so it cannot outlive that callback.
pub struct Key<'a> {
    ptr: *mut raw::RedisModuleKey,
    place: Place<'a>,
    _callback: PhantomData<&'a ()>,
}

/// Where a key is: its name, in the database selected in the callback it was opened in. Copied
/// out of an open key, so its lock can be filed while the key lends it; the database is looked
/// up only when asked for.
#[derive(Clone, Copy)]
pub struct Place<'a> {
    ctx: *mut raw::RedisModuleCtx,
    name: &'a [u8],
}

impl<'a> Place<'a> {
    pub fn db(&self) -> i32 {
        // SAFETY: a live context: a `Place` comes from a `Key`, which borrows its callback.
        unsafe { raw::RedisModule_GetSelectedDb.map_or(0, |f| f(self.ctx)) }
    }

    pub fn name(&self) -> &'a [u8] {
        self.name
    }
}

impl<'a> Key<'a> {
    /// The call's key, for reading.
    pub fn read(call: &'a Call<'a>) -> Self {
        // SAFETY: a `Call` holds the live context and key name of the running command.
        unsafe { Self::open(call.raw_ctx(), call.raw_key(), call.arg(1), raw::REDISMODULE_READ) }
    }

    /// The call's key, for reading and writing.
    pub fn write(call: &'a Call<'a>) -> Self {
        // SAFETY: as in `read`.
        unsafe { Self::open(call.raw_ctx(), call.raw_key(), call.arg(1), READ_WRITE) }
    }

    /// A key by name, in the selected database of the context the name was created in, for
    /// reading and writing.
    pub fn named(name: &'a KeyName<'a>) -> Self {
        // SAFETY: a `KeyName` borrows the live context it was created in.
        unsafe { Self::open(name.raw_ctx(), name.raw(), name.bytes(), READ_WRITE) }
    }

    /// # Safety
    /// `ctx` and `name` are live for `'a`.
    unsafe fn open(
        ctx: *mut raw::RedisModuleCtx,
        name: *mut raw::RedisModuleString,
        name_bytes: &'a [u8],
        mode: u32,
    ) -> Self {
        // SAFETY: live context and name (the caller's promise); Redis returns null or an open key.
        let ptr = unsafe {
            raw::RedisModule_OpenKey.map_or(std::ptr::null_mut(), |open| {
                open(ctx, name, mode as c_int).cast::<raw::RedisModuleKey>()
            })
        };
        Self { ptr, place: Place { ctx, name: name_bytes }, _callback: PhantomData }
    }

    fn kind(&self) -> c_int {
        if self.ptr.is_null() {
            return raw::REDISMODULE_KEYTYPE_EMPTY as c_int;
        }
        // SAFETY: ptr is an open key.
        unsafe { raw::RedisModule_KeyType.map_or(0, |f| f(self.ptr)) }
    }

    fn is_lock(&self) -> bool {
        // SAFETY: ptr is an open key of module type; the type pointer was set at load.
        self.kind() == raw::REDISMODULE_KEYTYPE_MODULE as c_int
            && unsafe { raw::RedisModule_ModuleTypeGetType.map(|f| f(self.ptr)) }
                == Some(*LOCK_TYPE.raw_type.borrow())
    }

    /// The lock stored here, `None` for an empty key, `WRONGTYPE` for anything else.
    pub fn lock(&mut self) -> Result<Option<&mut Lock>, LockError> {
        if self.kind() == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            return Ok(None);
        }
        if !self.is_lock() {
            return Err(LockError::WrongType);
        }
        // SAFETY: the value of a key of our type is always a `Box<Lock>` we stored.
        Ok(unsafe {
            let value = raw::RedisModule_ModuleTypeGetValue.map_or(std::ptr::null_mut(), |f| f(self.ptr));
            value.cast::<Lock>().as_mut()
        })
    }

    /// Stores a new lock in an empty key opened for writing and returns it as stored. No Redis
    /// TTL: the fence outlives the lease.
    pub fn set_lock(&mut self, lock: Lock) -> Result<&mut Lock, LockError> {
        let value = Box::into_raw(Box::new(lock));
        // SAFETY: ptr is open for writing; on success Redis owns `value` and frees it through our
        // type's free callback.
        let ok = unsafe {
            raw::RedisModule_ModuleTypeSetValue.is_some_and(|set| {
                set(self.ptr, *LOCK_TYPE.raw_type.borrow(), value.cast()) == raw::REDISMODULE_OK as c_int
            })
        };
        if ok {
            // SAFETY: Redis owns `value` now and frees it only when the key is overwritten or
            // deleted, which cannot happen while `self` is borrowed.
            Ok(unsafe { &mut *value })
        } else {
            // SAFETY: Redis did not take ownership.
            drop(unsafe { Box::from_raw(value) });
            Err(LockError::Internal)
        }
    }

    /// Where this key is, without borrowing it.
    pub fn place(&self) -> Place<'a> {
        self.place
    }

    /// The value of a plain string key, `None` for an empty key, `WRONGTYPE` for anything else.
    pub fn string(&self) -> Result<Option<&[u8]>, LockError> {
        const EMPTY: c_int = raw::REDISMODULE_KEYTYPE_EMPTY as c_int;
        const STRING: c_int = raw::REDISMODULE_KEYTYPE_STRING as c_int;
        match self.kind() {
            EMPTY => Ok(None),
            STRING => {
                let mut len = 0;
                // SAFETY: ptr is an open string key; the DMA pointer lives until the key closes.
                unsafe {
                    let dma = raw::RedisModule_StringDMA.map_or(std::ptr::null_mut(), |f| {
                        f(self.ptr, &mut len, raw::REDISMODULE_READ as c_int)
                    });
                    if dma.is_null() {
                        return Err(LockError::Internal);
                    }
                    Ok(Some(std::slice::from_raw_parts(dma.cast::<u8>(), len)))
                }
            }
            _ => Err(LockError::WrongType),
        }
    }

    pub fn delete(&self) -> Result<(), LockError> {
        // SAFETY: ptr is open for writing.
        let ok = unsafe {
            raw::RedisModule_DeleteKey.is_some_and(|f| f(self.ptr) == raw::REDISMODULE_OK as c_int)
        };
        ok.then_some(()).ok_or(LockError::Internal)
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: ptr was opened by us and is closed once.
            unsafe {
                if let Some(close) = raw::RedisModule_CloseKey {
                    close(self.ptr);
                }
            }
        }
    }
}
