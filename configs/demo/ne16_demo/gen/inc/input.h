#ifndef __INPUT_H__
#define __INPUT_H__

#include <pmsis.h>

#endif
