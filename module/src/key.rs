//! The command's key, open for the command's duration and closed on drop, with the type checks
//! every command needs.

use std::ffi::c_int;
use std::marker::PhantomData;

use redis_module::raw;

use crate::datatype::LOCK_TYPE;
use crate::error::LockError;
use crate::ffi::Call;
use crate::lease::Lock;

/// Borrows the `Call` it was opened for, so it cannot outlive the command.
pub struct Key<'a> {
    ptr: *mut raw::RedisModuleKey,
    _call: PhantomData<&'a Call<'a>>,
}

impl<'a> Key<'a> {
    /// The call's key, for reading.
    pub fn read(call: &'a Call<'a>) -> Self {
        Self::open(call, raw::REDISMODULE_READ)
    }

    /// The call's key, for reading and writing.
    pub fn write(call: &'a Call<'a>) -> Self {
        Self::open(call, raw::REDISMODULE_READ | raw::REDISMODULE_WRITE)
    }

    fn open(call: &'a Call<'a>, mode: u32) -> Self {
        // SAFETY: a `Call` holds the live context and key name of the running command; Redis
        // returns null or an open key.
        let ptr = unsafe {
            raw::RedisModule_OpenKey.map_or(std::ptr::null_mut(), |open| {
                open(call.raw_ctx(), call.raw_key(), mode as c_int).cast::<raw::RedisModuleKey>()
            })
        };
        Self { ptr, _call: PhantomData }
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
        unsafe {
            let value = raw::RedisModule_ModuleTypeGetValue.map_or(std::ptr::null_mut(), |f| f(self.ptr));
            Ok(value.cast::<Lock>().as_mut())
        }
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
