// Structural checks of a cached object before it is linked (object_check.h).
//
// Every offset, count and index is checked against the file or the table
// it indexes before it is used, with the sums done in 64 bits after a
// bound on each term, so that no field of a hostile file can make this
// code read outside |data|. Everything is copied out with memcpy: the
// payload comes from an allocator with no promise of ELF alignment.

#include "jit/object_check.h"

#include <elf.h>
#include <string.h>

typedef struct object_t {
  const unsigned char* data;
  uint64_t size;
  Elf64_Ehdr eh;
} object_t;

// Whether [offset, offset + length) lies inside [0, limit).
static bool in_range(uint64_t offset, uint64_t length, uint64_t limit) {
  return offset <= limit && length <= limit - offset;
}

static void section(const object_t* o, uint32_t index, Elf64_Shdr* out) {
  memcpy(out, o->data + o->eh.e_shoff + (uint64_t)index * sizeof(Elf64_Shdr),
         sizeof(*out));
}

// The width in bytes of the field an x86-64 relocation of |type| writes;
// 0 for a type our code generator never emits (and JITLink may not know).
static uint64_t x86_64_reloc_width(uint32_t type) {
  switch (type) {
    case R_X86_64_NONE:
      return 1;  // writes nothing; still must point into the section
    case R_X86_64_64:
    case R_X86_64_PC64:
    case R_X86_64_GOTOFF64:
    case R_X86_64_GOT64:
    case R_X86_64_GOTPCREL64:
    case R_X86_64_GOTPC64:
      return 8;
    case R_X86_64_PC32:
    case R_X86_64_PLT32:
    case R_X86_64_GOTPCREL:
    case R_X86_64_32:
    case R_X86_64_32S:
    case R_X86_64_GOTPC32:
    case R_X86_64_GOTPCRELX:
    case R_X86_64_REX_GOTPCRELX:
      return 4;
    default:
      return 0;
  }
}

// A string table: empty, or starting and ending with a NUL.
static const char* check_strtab(const object_t* o, const Elf64_Shdr* s) {
  if (s->sh_type != SHT_STRTAB) return "ELF: string table of another type";
  if (s->sh_size == 0) return NULL;
  const unsigned char* p = o->data + s->sh_offset;
  if (p[0] != 0 || p[s->sh_size - 1] != 0)
    return "ELF: string table not NUL-delimited";
  return NULL;
}

static const char* check_sections(const object_t* o) {
  // Extents first: the string tables are read below.
  for (uint32_t i = 1; i < o->eh.e_shnum; ++i) {
    Elf64_Shdr s;
    section(o, i, &s);
    if (s.sh_type != SHT_NOBITS && !in_range(s.sh_offset, s.sh_size, o->size))
      return "ELF: section outside the file";
  }
  Elf64_Shdr names;
  section(o, o->eh.e_shstrndx, &names);
  const char* why = check_strtab(o, &names);
  if (why) return why;
  uint32_t symtabs = 0;
  for (uint32_t i = 1; i < o->eh.e_shnum; ++i) {
    Elf64_Shdr s;
    section(o, i, &s);
    if (s.sh_name >= names.sh_size && s.sh_name != 0)
      return "ELF: section name out of range";
    if (s.sh_addralign > ((uint64_t)1 << 16) ||
        (s.sh_addralign & (s.sh_addralign - 1)) != 0)
      return "ELF: bad section alignment";
    if (s.sh_link >= o->eh.e_shnum) return "ELF: section link out of range";
    if (s.sh_type == SHT_STRTAB && (why = check_strtab(o, &s))) return why;
    if (s.sh_type == SHT_SYMTAB && ++symtabs > 1)
      return "ELF: more than one symbol table";
    if (s.sh_type == SHT_SYMTAB_SHNDX) return "ELF: extended section indices";
  }
  return NULL;
}

// The symbol table (|*out_symtab| = 0 when there is none) and its checks.
static const char* check_symbols(const object_t* o, uint32_t* out_symtab) {
  *out_symtab = 0;
  for (uint32_t i = 1; i < o->eh.e_shnum; ++i) {
    Elf64_Shdr s;
    section(o, i, &s);
    if (s.sh_type != SHT_SYMTAB) continue;
    *out_symtab = i;
    if (s.sh_entsize != sizeof(Elf64_Sym) || s.sh_size % sizeof(Elf64_Sym))
      return "ELF: bad symbol table entry size";
    Elf64_Shdr strings;
    section(o, s.sh_link, &strings);
    const char* why = check_strtab(o, &strings);
    if (why) return why;
    uint64_t count = s.sh_size / sizeof(Elf64_Sym);
    if (s.sh_info > count) return "ELF: bad first global symbol";
    for (uint64_t k = 1; k < count; ++k) {
      Elf64_Sym sym;
      memcpy(&sym, o->data + s.sh_offset + k * sizeof(sym), sizeof(sym));
      if (sym.st_name >= strings.sh_size && sym.st_name != 0)
        return "ELF: symbol name out of range";
      uint16_t shndx = sym.st_shndx;
      if (shndx == SHN_UNDEF || shndx == SHN_ABS || shndx == SHN_COMMON)
        continue;
      if (shndx >= o->eh.e_shnum) return "ELF: symbol in no section";
      if (o->eh.e_type != ET_REL) continue;  // values are addresses there
      Elf64_Shdr home;
      section(o, shndx, &home);
      if (!in_range(sym.st_value, sym.st_size, home.sh_size))
        return "ELF: symbol outside its section";
    }
  }
  return NULL;
}

static const char* check_relocations(const object_t* o, uint32_t symtab) {
  uint64_t num_symbols = 0;
  if (symtab) {
    Elf64_Shdr s;
    section(o, symtab, &s);
    num_symbols = s.sh_size / sizeof(Elf64_Sym);
  }
  for (uint32_t i = 1; i < o->eh.e_shnum; ++i) {
    Elf64_Shdr s;
    section(o, i, &s);
    if (s.sh_type != SHT_RELA && s.sh_type != SHT_REL) continue;
    uint64_t entry =
        s.sh_type == SHT_RELA ? sizeof(Elf64_Rela) : sizeof(Elf64_Rel);
    if (s.sh_entsize != entry || s.sh_size % entry)
      return "ELF: bad relocation entry size";
    if (s.sh_link != symtab || symtab == 0)
      return "ELF: relocations without the symbol table";
    if (s.sh_info == 0 || s.sh_info >= o->eh.e_shnum)
      return "ELF: relocations for no section";
    Elf64_Shdr target;
    section(o, s.sh_info, &target);
    bool x86 = o->eh.e_machine == EM_X86_64;
    if (x86 && target.sh_type == SHT_NOBITS)
      return "ELF: relocations in a section without bytes";
    for (uint64_t k = 0; k < s.sh_size / entry; ++k) {
      Elf64_Rel r;  // the leading fields of Elf64_Rela too
      memcpy(&r, o->data + s.sh_offset + k * entry, sizeof(r));
      if (ELF64_R_SYM(r.r_info) >= num_symbols)
        return "ELF: relocation against no symbol";
      if (!x86) continue;  // the CUDA driver checks its own
      uint64_t width = x86_64_reloc_width(ELF64_R_TYPE(r.r_info));
      if (width == 0) return "ELF: unexpected relocation type";
      if (o->eh.e_type == ET_REL &&
          !in_range(r.r_offset, width, target.sh_size))
        return "ELF: relocation outside its section";
    }
  }
  return NULL;
}

static bool defines(const object_t* o, uint32_t symtab, const char* name) {
  if (!symtab) return false;
  Elf64_Shdr s, strings;
  section(o, symtab, &s);
  section(o, s.sh_link, &strings);
  const char* table = (const char*)o->data + strings.sh_offset;
  size_t length = strlen(name);
  for (uint64_t k = 1; k < s.sh_size / sizeof(Elf64_Sym); ++k) {
    Elf64_Sym sym;
    memcpy(&sym, o->data + s.sh_offset + k * sizeof(sym), sizeof(sym));
    int bind = ELF64_ST_BIND(sym.st_info);
    if (sym.st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK))
      continue;
    // st_name < the table's size, which ends with a NUL (checked above).
    if (length < strings.sh_size - sym.st_name &&
        memcmp(table + sym.st_name, name, length + 1) == 0)
      return true;
  }
  return false;
}

const char* tj_object_check(const void* data, size_t size,
                            const tj_object_expect_t* expect) {
  if (!data || size < sizeof(Elf64_Ehdr)) return "ELF: shorter than a header";
  object_t o;
  o.data = data;
  o.size = size;
  memcpy(&o.eh, data, sizeof(o.eh));
  const Elf64_Ehdr* eh = &o.eh;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0) return "not an ELF object";
  if (eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_ident[EI_DATA] != ELFDATA2LSB ||
      eh->e_ident[EI_VERSION] != EV_CURRENT || eh->e_version != EV_CURRENT)
    return "ELF: not little-endian ELF64";
  if (eh->e_machine != expect->machine) return "ELF: another machine";
  if (expect->type ? eh->e_type != expect->type
                   : eh->e_type != ET_REL && eh->e_type != ET_EXEC)
    return "ELF: another object type";
  if (eh->e_ehsize != sizeof(Elf64_Ehdr) ||
      eh->e_shentsize != sizeof(Elf64_Shdr))
    return "ELF: bad header sizes";
  // No extended numbering (e_shnum 0): our objects have few sections.
  if (eh->e_shnum == 0 || eh->e_shnum >= SHN_LORESERVE ||
      eh->e_shstrndx == SHN_UNDEF || eh->e_shstrndx >= eh->e_shnum)
    return "ELF: bad section count";
  if (!in_range(eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr),
                o.size))
    return "ELF: section table outside the file";
  if (eh->e_type == ET_REL
          ? eh->e_phnum != 0
          : (eh->e_phnum &&
             (eh->e_phentsize != sizeof(Elf64_Phdr) ||
              !in_range(eh->e_phoff, (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr),
                        o.size))))
    return "ELF: bad program headers";
  const char* why = check_sections(&o);
  uint32_t symtab = 0;
  if (!why) why = check_symbols(&o, &symtab);
  if (!why) why = check_relocations(&o, symtab);
  if (why) return why;
  for (size_t i = 0; i < expect->num_symbols; ++i) {
    if (!defines(&o, symtab, expect->symbols[i]))
      return "ELF: an entry point is missing";
  }
  return NULL;
}
