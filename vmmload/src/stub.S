	.text
	.code64
/* offset 0: generic entry (standard KVM; also used until the backend is known) */
entry:
	out %al, $0xe0
	sysretq
	hlt
	.org 0x10
/* offset 0x10: PVM entry, runs at CPL3. Fast paths save r11, rcx, rsi, rdi,
 * rdx (in that order) below the red zone; vmmload relies on that layout when
 * a store to a bad user pointer faults. */
entry_pvm:
	test %rax, %rax
	jz read_path
	cmpq $0, ctl_fast(%rip)
	je slow
	cmp $39, %rax
	je id_pid
	cmp $102, %rax
	je id_uid
	cmp $104, %rax
	je id_gid
	cmp $107, %rax
	je id_euid
	cmp $108, %rax
	je id_egid
	cmp $228, %rax
	je clock_gettime
	cmp $96, %rax
	je gettimeofday
	cmp $201, %rax
	je time
	jmp slow
id_pid:
	mov ctl_pid(%rip), %rax
	jmp ret_value
id_uid:
	mov ctl_uid(%rip), %rax
	jmp ret_value
id_gid:
	mov ctl_gid(%rip), %rax
	jmp ret_value
id_euid:
	mov ctl_euid(%rip), %rax
	jmp ret_value
id_egid:
	mov ctl_egid(%rip), %rax
ret_value:
	lea -128(%rsp), %rsp
	push %r11
	popfq
	lea 128(%rsp), %rsp
	jmp *%rcx

/* rax = nanoseconds of the clock in rdi (0 realtime, 1 monotonic) */
	.macro NOW_NS
	rdtsc
	shl $32, %rdx
	or %rdx, %rax
	sub ctl_tsc(%rip), %rax
	mulq ctl_mult(%rip)
	shrd $32, %rdx, %rax
	.endm

clock_gettime:
	cmp $1, %rdi
	ja slow
	lea -128(%rsp), %rsp
	push %r11
	push %rcx
	push %rsi
	push %rdi
	push %rdx
	NOW_NS
	test %rdi, %rdi
	jnz 1f
	add ctl_real(%rip), %rax
	jmp 2f
1:	add ctl_mono(%rip), %rax
2:	xor %edx, %edx
	mov $1000000000, %ecx
	div %rcx
store_ts:
	mov %rax, (%rsi)
	mov %rdx, 8(%rsi)
	xor %eax, %eax
	jmp fast_out

gettimeofday:
	test %rsi, %rsi
	jnz slow
	test %rdi, %rdi
	jz slow
	lea -128(%rsp), %rsp
	push %r11
	push %rcx
	push %rsi
	push %rdi
	push %rdx
	NOW_NS
	add ctl_real(%rip), %rax
	xor %edx, %edx
	mov $1000, %ecx
	div %rcx
	xor %edx, %edx
	mov $1000000, %ecx
	div %rcx
store_tv:
	mov %rax, (%rdi)
	mov %rdx, 8(%rdi)
	xor %eax, %eax
	jmp fast_out

time:
	lea -128(%rsp), %rsp
	push %r11
	push %rcx
	push %rsi
	push %rdi
	push %rdx
	NOW_NS
	add ctl_real(%rip), %rax
	xor %edx, %edx
	mov $1000000000, %ecx
	div %rcx
	test %rdi, %rdi
	jz fast_out
store_t:
	mov %rax, (%rdi)
	jmp fast_out

read_path:
	cmp ctl_fd(%rip), %rdi
	jne slow
	lea -128(%rsp), %rsp
	push %r11
	push %rcx
	push %rsi
	push %rdi
	push %rdx
	mov ctl_len(%rip), %rcx
	sub ctl_pos(%rip), %rcx
	/* less buffered than asked for: the VMM completes the read, so a
	   regular file never reads short before its end */
	cmp %rdx, %rcx
	jb refill
	mov %rdx, %rcx
	mov %rcx, %rax
	mov %rsi, %rdi
	mov ctl_buf(%rip), %rsi
	add ctl_pos(%rip), %rsi
	add %rcx, ctl_pos(%rip)
copy:
	rep movsb
fast_out:
	pop %rdx
	pop %rdi
	pop %rsi
	pop %rcx
	popfq
	lea 128(%rsp), %rsp
	jmp *%rcx
refill:
	pop %rdx
	pop %rdi
	pop %rsi
	pop %rcx
	pop %r11
	lea 128(%rsp), %rsp
	xor %eax, %eax
slow:
	out %al, $0xe0
	hlt
code_end:
	.org 0x2000
ctl_fd: .quad -1
ctl_buf: .quad 0
ctl_pos: .quad 0
ctl_len: .quad 0
ctl_fast: .quad 0
ctl_tsc: .quad 0
ctl_mult: .quad 0
ctl_real: .quad 0
ctl_mono: .quad 0
ctl_pid: .quad 0
ctl_uid: .quad 0
ctl_gid: .quad 0
ctl_euid: .quad 0
ctl_egid: .quad 0
